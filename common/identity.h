// Who this process is: the machine's host name and the rank variables a launcher gives each
// worker (torchrun, xtimer_run, DeepSpeed: RANK, WORLD_SIZE, LOCAL_RANK). Read here only, so
// every component names a host and parses the rank the same way. Part of xtimer_common_lite:
// safe inside the preloaded library (no lock, no thread; not for a signal handler).
#pragma once

#include <string>

namespace xtimer {

// gethostname(), or "unknown" in the rare case it fails.
std::string HostName();

// The launcher's rank variables; each -1 when unset, empty or not a whole non-negative number
// (WORLD_SIZE also when 0).
struct RankEnv {
  int rank = -1;        // RANK
  int world_size = -1;  // WORLD_SIZE
  int local_rank = -1;  // LOCAL_RANK
  bool has_rank() const { return rank >= 0 && world_size > 0; }
};
RankEnv ReadRankEnv();

}  // namespace xtimer
