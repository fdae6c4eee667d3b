// Kernels shared by the simulated-runtime tests: exported host functions `void(void**)`.
#pragma once
#include <cuda_runtime_api.h>
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
// A barrier: ++*(std::atomic<int>*)args[0], then blocks until it reaches args[1] (int). Kernels
// on streams that run one at a time never all get past it.
extern "C" SIMGPU_KERNEL void simgpu_test_barrier(void** args);

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

// The device time of `op` (work queued on stream s), in ms, from an event pair around it. The
// stream is held by a kernel until the pair and the op are all queued, so both events and the op
// begin when that kernel ends: however late the host thread runs between the calls, the figure
// is the op's own device time (the device clock does not count a worker's wait for a CPU).
template <class Op>
double device_ms(cudaStream_t s, Op&& op) {
  std::atomic<int> hold{0};
  std::atomic<int>* held = &hold;
  void* hold_args[] = {&held};
  cudaEvent_t a = nullptr, b = nullptr;
  float ms = -1;
  if (cudaEventCreate(&a) == cudaSuccess && cudaEventCreate(&b) == cudaSuccess &&
      cudaLaunchKernel((const void*)simgpu_test_wait_flag, dim3(1), dim3(1), hold_args, 0, s) == cudaSuccess) {
    cudaEventRecord(a, s);
    op();
    cudaEventRecord(b, s);
    hold.store(1);
    hold.notify_all();
    if (cudaEventSynchronize(b) != cudaSuccess || cudaEventElapsedTime(&ms, a, b) != cudaSuccess) ms = -1;
  }
  hold.store(1);
  hold.notify_all();
  cudaStreamSynchronize(s);
  if (a) cudaEventDestroy(a);
  if (b) cudaEventDestroy(b);
  return ms;
}

}  // namespace simtest
