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

// How far a stream's device clock may run ahead of real time before its worker sleeps. A kernel
// that ends within this of now does not sleep: its end is only the device clock's, and the worker
// goes on to the next op, which starts there. Short kernels (a few microseconds) then cost no timer
// each, and the simulated GPU's threads leave the host's cores to the training process, as a real
// GPU does. The host may see such a kernel complete up to this long before real time reaches its
// end; every time it reads (events, CUPTI records) is the device clock's, and a run of kernels that
// adds up to more than this sleeps to its end, so a GPU-bound stream still takes its modelled time.
constexpr int64_t kDeviceLeadNs = 20'000;

// A device-time sleep to `deadline` (a kernel's modelled end), skipped within kDeviceLeadNs.
inline void device_sleep_until_ns(int64_t deadline) {
  if (deadline - now_ns() > kDeviceLeadNs) sleep_until_ns(deadline);
}

}  // namespace simgpu
