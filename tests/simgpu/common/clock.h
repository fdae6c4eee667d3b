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

// Sleeps until an absolute CLOCK_MONOTONIC deadline. An absolute deadline does not drift
// when the sleep is interrupted and resumed. The thread's usual wake-up latency (learnt
// from previous sleeps, capped at 200 us) is subtracted, so on a busy machine a simulated
// kernel still ends at its deadline on average instead of always a little late.
inline void sleep_until_ns(int64_t deadline) {
  thread_local int64_t latency = 0;
  const int64_t target = deadline - latency;
  timespec ts{time_t(target / 1000000000), long(target % 1000000000)};
  if (target > now_ns()) {
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
  }
  const int64_t late = now_ns() - deadline;
  latency += late / 2;
  if (latency < 0) latency = 0;
  if (latency > 200000) latency = 200000;
}

}  // namespace simgpu
