// Host-side cost of a kernel launch on the simulated runtime, for launch_overhead.py, which runs
// this program once without and once under xtimer_launch and prints the difference:
//   BM_Launch          cudaLaunchKernel as the program sees it (the xtimer hook when preloaded);
//   BM_EventRecord     one cudaEventRecord: what event-pair mode records per plain kernel (its end);
//   BM_EventRecordPair two cudaEventRecord calls: what a start/end pair costs by itself;
//   BM_Step            256 launches and a stream synchronisation, per step.
// The baseline has to be a process without the library: inside one, even a launch that skips the
// runtime hook is timed by the driver hook below it (the runtime reaches the driver through
// cuGetProcAddress, as the real one does).
// While timed, the stream's worker is held by a gate kernel, so every launch only queues work:
// otherwise each launch pays for waking the worker thread (a futex syscall or not, depending on
// how the two threads meet on the CPUs), which moved the figures by a microsecond from run to
// run and drowned the ~100 ns being measured.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <atomic>

namespace {

std::atomic<bool> g_gate_open{false};

}  // namespace

extern "C" __attribute__((visibility("default"))) void xt_empty_kernel(void**) {}

// Holds the stream's worker until the gate opens.
extern "C" __attribute__((visibility("default"))) void xt_gate_kernel(void**) {
  while (!g_gate_open.load(std::memory_order_acquire)) usleep(50);
}

namespace {

cudaStream_t Stream() {
  static cudaStream_t s = [] {
    cudaStream_t st;
    cudaStreamCreate(&st);
    return st;
  }();
  return s;
}

void OpenGate() {
  g_gate_open.store(true, std::memory_order_release);
  cudaStreamSynchronize(Stream());
}

// Lets the stream drain and closes the gate again behind a new gate kernel.
void Regate() {
  OpenGate();
  g_gate_open.store(false, std::memory_order_release);
  cudaLaunchKernel((const void*)xt_gate_kernel, dim3(1), dim3(1), nullptr, 0, Stream());
}

// Keeps the queue short so every iteration costs the same.
void Drain(benchmark::State& state, int64_t i) {
  if (i % 4096 == 0) {
    state.PauseTiming();
    Regate();
    state.ResumeTiming();
  }
}

void BM_Launch(benchmark::State& state) {
  Regate();
  int64_t i = 0;
  for (auto _ : state) {
    cudaLaunchKernel((const void*)xt_empty_kernel, dim3(1), dim3(1), nullptr, 0, Stream());
    Drain(state, ++i);
  }
  OpenGate();
}

// A ring of events, as the hook's pool hands out, rather than one event recorded over and over.
constexpr int kRing = 1024;
cudaEvent_t* Ring() {
  static cudaEvent_t ring[kRing];
  static bool created = [] {
    for (cudaEvent_t& e : ring) cudaEventCreate(&e);
    return true;
  }();
  (void)created;
  return ring;
}

void BM_EventRecord(benchmark::State& state) {
  cudaEvent_t* ring = Ring();
  Regate();
  int64_t i = 0;
  for (auto _ : state) {
    cudaEventRecord(ring[i % kRing], Stream());
    Drain(state, ++i);
  }
  OpenGate();
}

void BM_EventRecordPair(benchmark::State& state) {
  cudaEvent_t* ring = Ring();
  Regate();
  int64_t i = 0;
  for (auto _ : state) {
    cudaEventRecord(ring[(2 * i) % kRing], Stream());
    cudaEventRecord(ring[(2 * i + 1) % kRing], Stream());
    Drain(state, ++i);
  }
  OpenGate();
}

// One "step": 256 launches and the wait for them, the stream's worker running as it goes. Besides
// the launch path this carries what timing costs on the stream side (event records, or CUPTI's
// records of each kernel) and what the library's poller takes from the two CPUs.
void BM_Step(benchmark::State& state) {
  OpenGate();
  for (auto _ : state) {
    for (int i = 0; i < 256; ++i)
      cudaLaunchKernel((const void*)xt_empty_kernel, dim3(1), dim3(1), nullptr, 0, Stream());
    cudaStreamSynchronize(Stream());
  }
}

BENCHMARK(BM_Launch)->MinTime(0.5);
BENCHMARK(BM_Step)->MinTime(0.5);
BENCHMARK(BM_EventRecord)->MinTime(0.5);
BENCHMARK(BM_EventRecordPair)->MinTime(0.5);

}  // namespace

BENCHMARK_MAIN();
