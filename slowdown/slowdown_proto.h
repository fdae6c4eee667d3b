// Step records and verdicts on the agent <-> collector wire (common/proto/collector.proto). A
// record read from the wire goes through CheckStepRecord like any other; a verdict read from it
// (the agent's copy of the collector's) keeps only findings with a known cause and scope.
#pragma once

#include <string>

#include "collector.pb.h"
#include "common/steps/step_record.h"
#include "slowdown/slowdown_verdict.h"

namespace xtimer::slowdown {

v1::StepRecord StepRecordToProto(const StepRecord& r);
bool StepRecordFromProto(const v1::StepRecord& p, StepRecord* out, std::string* why);

v1::Slowdown VerdictToProto(const Verdict& v);
Verdict VerdictFromProto(const v1::Slowdown& p);

}  // namespace xtimer::slowdown
