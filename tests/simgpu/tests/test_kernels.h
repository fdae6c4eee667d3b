// Kernels shared by the simulated-runtime tests: exported host functions `void(void**)`.
#pragma once
#include <simgpu/kernel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <ctime>
#include <vector>

// Sleeps args[0] (int64 ns) of device time (simgpu_sleep_ns).
extern "C" SIMGPU_KERNEL void simgpu_test_sleep(void** args);
// *(int*)args[0] = *(int*)args[1], as an atomic store.
extern "C" SIMGPU_KERNEL void simgpu_test_store(void** args);
// Blocks until *(std::atomic<int>*)args[0] becomes non-zero (futex wait, no spin).
extern "C" SIMGPU_KERNEL void simgpu_test_wait_flag(void** args);
// ++*(std::atomic<int>*)args[0].
extern "C" SIMGPU_KERNEL void simgpu_test_increment(void** args);
// *(int*)args[1] = *(int*)args[0] (atomic loads/stores).
extern "C" SIMGPU_KERNEL void simgpu_test_copy_int(void** args);
// Appends args[1] (int) to the std::vector<int> at args[0] (single stream only).
extern "C" SIMGPU_KERNEL void simgpu_test_append(void** args);

namespace simtest {

inline int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace simtest
