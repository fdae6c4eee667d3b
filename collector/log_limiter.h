// Keeps a flood of refusals from flooding the log: at most 20 lines per 10 s, then, with the
// first line of the next period, how many were left out.
//
// Thread-safe (its own mutex, held only inside Allow); any thread may call Allow.
#pragma once

#include <cstdint>

#include "common/mutex.h"

namespace xtimer::collector {

class LogLimiter {
 public:
  // true: log this line. *suppressed_before: lines refused in the period that just ended (non-zero
  // only on the first call of a new period), for a "N more were not logged" line.
  bool Allow(double now_s, uint64_t* suppressed_before) XT_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (now_s - window_start_ >= kPeriodS) {
      *suppressed_before = suppressed_;
      suppressed_ = 0;
      window_start_ = now_s;
      lines_ = 0;
    } else {
      *suppressed_before = 0;
    }
    if (lines_ < kBurst) {
      ++lines_;
      return true;
    }
    ++suppressed_;
    return false;
  }

 private:
  static constexpr double kPeriodS = 10;
  static constexpr int kBurst = 20;
  Mutex mu_;
  double window_start_ XT_GUARDED_BY(mu_) = -1e18;
  int lines_ XT_GUARDED_BY(mu_) = 0;
  uint64_t suppressed_ XT_GUARDED_BY(mu_) = 0;
};

}  // namespace xtimer::collector
