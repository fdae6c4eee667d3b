// What the collector knows of each rank of the job: its last report (or, until it reports, its
// registration), when it was heard from, and the job's world size.
//
// Guarantees: every rank kept is in [0, world) of the current world; when ranks report another
// world size (an elastic restart), the old world's ranks are forgotten, so no dump round waits
// for a rank that no longer exists. Strings are capped (host 255 bytes, trigger 1,024, op names
// 256, at most 512 op classes per rank). A state-only report (a hang event, no ops) keeps the op
// statistics of the last full one.
//
// Not thread-safe: the core owns one and calls it under its mutex (collector_core.cc).
#pragma once

#include <cstdint>
#include <map>

#include "collector.pb.h"

namespace xtimer::collector {

struct RankEntry {
  v1::RankReport report;
  double last_seen_s = 0;
  int64_t last_seen_wall_ms = 0;
  bool reported = false;  // false: known only from a registration
};

class RankTable {
 public:
  // rank in [0, world_size), world_size in [1, 2^20].
  static bool Valid(const v1::Rank& rank);

  int32_t world() const { return world_; }
  // Makes `world` the job's world size; true when it changed (the caller drops what other
  // tables hold of the old world's ranks).
  bool AdoptWorld(int32_t world);
  // A valid rank from a registration: known, unless it has reported already.
  void Register(const v1::Rank& rank);
  // A valid rank's report. true: it says RANK_STATE_HUNG and the rank's previous report did not.
  bool Update(const v1::RankReport& report, double now, int64_t wall_ms);
  // Some rank heard from in the last stale_after_s reports a hang.
  bool AnyHung(double now, double stale_after_s) const;

  const std::map<int32_t, RankEntry>& entries() const { return ranks_; }

 private:
  std::map<int32_t, RankEntry> ranks_;
  int32_t world_ = 0;
};

}  // namespace xtimer::collector
