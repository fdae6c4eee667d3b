// Monotonic time helpers shared by every simulated library.
#pragma once
#include <cerrno>
#include <cstdint>
#include <ctime>

namespace simgpu {

inline int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Sleeps until an absolute CLOCK_MONOTONIC deadline: an absolute deadline does not drift
// when the sleep is interrupted and resumed.
inline void sleep_until_ns(int64_t deadline) {
  timespec ts{time_t(deadline / 1000000000), long(deadline % 1000000000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

}  // namespace simgpu
