// Step records and verdicts on the agent <-> collector wire (common/proto/collector.proto). Only
// the two ends of that wire convert: the agent's gRPC link (launcher/agent/grpc_collector_link.cc)
// and the collector's gRPC service (collector/collector_server.cc). Everything else, the collector
// core embedded in a single node's agent included, passes the structs as they are.
//
// A record read from the wire keeps at most what a reader keeps (StepLimits: entries beyond are
// dropped, strings cut), so a megabyte string is not copied; the collector core then checks it
// (CheckStepRecord) like every record it is given. A verdict read from the wire (the agent's copy
// of the collector's) keeps only findings with a known cause and scope.
#pragma once

#include "collector.pb.h"
#include "common/steps/step_record.h"
#include "slowdown/slowdown_verdict.h"

namespace xtimer::slowdown {

v1::StepRecord StepRecordToProto(const StepRecord& r);
StepRecord StepRecordFromProto(const v1::StepRecord& p);

v1::Slowdown VerdictToProto(const Verdict& v);
Verdict VerdictFromProto(const v1::Slowdown& p);

}  // namespace xtimer::slowdown
