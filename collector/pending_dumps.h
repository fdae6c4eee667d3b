// The stacks ranks dumped on their own (upload with dump_id "") while no dump round was open:
// kept for a round that starts within XTIMER_DUMP_WAIT seconds, which takes them in (TakeSince).
//
// Guarantees: one dump per rank (a newer one replaces it); at most 512 MiB in all, the oldest
// dropped first; dumps older than max(dump_wait_s, 1 s) are dropped by Expire.
//
// Not thread-safe: the core owns one and calls it under its mutex (collector_core.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace xtimer::collector {

struct PendingDump {
  std::string bytes;   // the stack file as uploaded (validated when it came)
  std::string source;  // "node N rank R upload", for the merge's skipped list and logs
  double received_s = 0;
};

class PendingDumps {
 public:
  void Keep(int32_t rank, const std::string& bytes, const std::string& source, double now);
  // Removes and returns the dumps received at or after `since`.
  std::vector<std::pair<int32_t, PendingDump>> TakeSince(double since);
  // Drops the dumps received more than max_age_s ago.
  void Expire(double now, double max_age_s);

 private:
  std::map<int32_t, PendingDump> by_rank_;
  size_t bytes_ = 0;  // sum of by_rank_'s bytes
};

}  // namespace xtimer::collector
