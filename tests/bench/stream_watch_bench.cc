// What CUPTI mode's launch callback adds for hang detection (preload/stream_watch.h): the work
// of one launch's entry and exit callbacks on StreamWatch, on one stream and on eight, from one
// thread and from four launching onto the same stream (its slot's cache line shared). The
// baseline in the same run is one clock read (MonotonicNs, which the exit does once); CUPTI's
// own cost of calling the callback is not in these figures (the real one is measured on a GPU,
// tests/gpu/overhead.py).
#include <benchmark/benchmark.h>

#include <atomic>
#include <string>

#include "common/clock.h"
#include "preload/timing/stream_watch.h"

namespace xtimer {
namespace {

const StreamWatch::Probe kProbe = {[](void*, void*) { return -1; }, [](const void*, int) { return std::string(); },
                                   [] { return false; }};
StreamWatch g_watch(kProbe);
std::atomic<uint32_t> g_correlation{1};

void Launch(void* stream) {
  StreamLaunch l;
  l.stream = stream;
  l.context = reinterpret_cast<void*>(0x7000);
  l.func = reinterpret_cast<const void*>(0x1234);
  l.kind = LaunchKind::kDriverKernel;
  l.correlation = g_correlation.fetch_add(1, std::memory_order_relaxed);
  g_watch.OnLaunched(g_watch.OnLaunchEntry(l), l.correlation);
}

void BM_ClockRead(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(MonotonicNs());
}

void BM_LaunchOneStream(benchmark::State& state) {
  for (auto _ : state) Launch(reinterpret_cast<void*>(0x10000));
}

void BM_LaunchEightStreams(benchmark::State& state) {
  uintptr_t i = 0;
  for (auto _ : state) Launch(reinterpret_cast<void*>(0x20000 + 0x100 * (i++ & 7)));
}

BENCHMARK(BM_ClockRead)->MinTime(0.2);
BENCHMARK(BM_LaunchOneStream)->MinTime(0.2);
BENCHMARK(BM_LaunchOneStream)->MinTime(0.2)->Threads(4);
BENCHMARK(BM_LaunchEightStreams)->MinTime(0.2);

}  // namespace
}  // namespace xtimer

BENCHMARK_MAIN();
