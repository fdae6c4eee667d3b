// Ranks out of step across nodes: the agents forward their ranks' collective fingerprints with
// their reports (ReportRequest.prints); the collector feeds them to the same comparison the node
// agent runs over its own ranks (common/desync/matcher.h). Each mismatch decided becomes
// out_dir/desync-<time>-<comm>/verdict.json ("kind": "desync", docs/formats.md) and one log
// line; the core then asks every rank for its stacks as for a hang (a dump round).
//
// Threads: Add from any report call, Tick from the core's Tick; its own lock, never held across
// a file write, never taken with the core's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collector.pb.h"
#include "common/desync/matcher.h"
#include "common/mutex.h"

namespace xtimer::collector {

class DesyncWatch {
 public:
  explicit DesyncWatch(std::string out_dir) : out_dir_(std::move(out_dir)) {}

  // A report's fingerprints; ones that break the rules (no communicator, seq 0, rank outside
  // [0, 2^20), over-long strings) are dropped. Returns how many were dropped.
  size_t Add(const google::protobuf::RepeatedPtrField<v1::CallPrint>& prints, int64_t now_ms) XT_EXCLUDES(mu_);

  // The mismatches decided by `now_ms`, each written and logged.
  std::vector<desync::Mismatch> Tick(int64_t now_ms, int64_t unix_ms) XT_EXCLUDES(mu_);

 private:
  const std::string out_dir_;
  Mutex mu_;
  desync::Matcher matcher_ XT_GUARDED_BY(mu_);
};

}  // namespace xtimer::collector
