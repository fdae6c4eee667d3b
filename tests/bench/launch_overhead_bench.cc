// Host-side cost that libxtimer_preload.so adds to a kernel launch, measured on the simulated
// runtime in one run (run it under xtimer_launch; launch_overhead.py does and prints the ratio):
//   BM_LaunchDirect   the runtime's own cudaLaunchKernel, called through a pointer taken from
//                     libcudart.so.13 (bypasses any interposer): the baseline;
//   BM_LaunchHooked   cudaLaunchKernel as the program sees it (the xtimer hook when preloaded);
//   BM_EventRecordPair two cudaEventRecord calls: what timing with events costs by itself, which
//                     the target (< 300 ns added per launch) excludes.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

extern "C" __attribute__((visibility("default"))) void xt_empty_kernel(void**) {}

namespace {

using LaunchFn = decltype(&cudaLaunchKernel);
using RecordFn = decltype(&cudaEventRecord);

template <typename T>
T FromRuntime(const char* name) {
  void* h = dlopen("libcudart.so.13", RTLD_LAZY | RTLD_NOLOAD);
  void* f = h ? dlsym(h, name) : nullptr;
  if (f == nullptr) {
    std::fprintf(stderr, "cannot find %s in libcudart.so.13\n", name);
    std::exit(1);
  }
  return reinterpret_cast<T>(f);
}

cudaStream_t Stream() {
  static cudaStream_t s = [] {
    cudaStream_t st;
    cudaStreamCreate(&st);
    return st;
  }();
  return s;
}

// Keeps the simulated stream's queue short so every iteration costs the same.
void Drain(benchmark::State& state, int64_t i) {
  if (i % 512 == 0) {
    state.PauseTiming();
    cudaStreamSynchronize(Stream());
    state.ResumeTiming();
  }
}

void BM_LaunchDirect(benchmark::State& state) {
  static LaunchFn launch = FromRuntime<LaunchFn>("cudaLaunchKernel");
  int64_t i = 0;
  for (auto _ : state) {
    launch((const void*)xt_empty_kernel, dim3(1), dim3(1), nullptr, 0, Stream());
    Drain(state, ++i);
  }
  cudaStreamSynchronize(Stream());
}

void BM_LaunchHooked(benchmark::State& state) {
  int64_t i = 0;
  for (auto _ : state) {
    cudaLaunchKernel((const void*)xt_empty_kernel, dim3(1), dim3(1), nullptr, 0, Stream());
    Drain(state, ++i);
  }
  cudaStreamSynchronize(Stream());
}

void BM_EventRecordPair(benchmark::State& state) {
  static RecordFn record = FromRuntime<RecordFn>("cudaEventRecord");
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  int64_t i = 0;
  for (auto _ : state) {
    record(a, Stream());
    record(b, Stream());
    Drain(state, ++i);
  }
  cudaStreamSynchronize(Stream());
}

BENCHMARK(BM_LaunchDirect)->MinTime(1.0);
BENCHMARK(BM_LaunchHooked)->MinTime(1.0);
BENCHMARK(BM_EventRecordPair)->MinTime(1.0);

}  // namespace

BENCHMARK_MAIN();
