// What a collective's fingerprint costs on the launch path (preload/timing/comm_table.h,
// RecordPrint: the stores the NCCL hook adds per collective when XTIMER_DESYNC=1), against one
// clock read in the same run; and what the link thread's read of them costs per call
// (TakePrints, every 0.1 s, off the launch path).
#include <benchmark/benchmark.h>

#include <memory>

#include "common/clock.h"
#include "preload/timing/comm_table.h"

namespace xtimer {
namespace {

struct Table {
  Table() {
    comms->EnablePrints(true);
    unsigned char uid[128] = {1};
    slot = comms->Register(reinterpret_cast<void*>(0x10), uid, sizeof uid, 0, 8, 0);
  }
  std::unique_ptr<CommTable> comms = std::make_unique<CommTable>();
  int slot = -1;
};

void BM_ClockRead(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(MonotonicNs());
}

// The hook's part: number the call (as without fingerprints) and record its fingerprint.
void BM_NumberOnly(benchmark::State& state) {
  Table t;
  Comm& c = t.comms->at(t.slot);
  for (auto _ : state) benchmark::DoNotOptimize(c.collective_seq.fetch_add(1, std::memory_order_relaxed));
}

void BM_NumberAndRecordPrint(benchmark::State& state) {
  Table t;
  Comm& c = t.comms->at(t.slot);
  for (auto _ : state) {
    uint64_t seq = c.collective_seq.fetch_add(1, std::memory_order_relaxed) + 1;
    t.comms->RecordPrint(t.slot, seq, "ncclAllReduce", 1 << 20, 7, 0, -1, 0);
  }
}

// The link thread's read, per fingerprint, in batches of 128 calls.
void BM_TakePrintsPerCall(benchmark::State& state) {
  Table t;
  Comm& c = t.comms->at(t.slot);
  uint64_t lost = 0, taken = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (int i = 0; i < 128; ++i) {
      uint64_t seq = c.collective_seq.fetch_add(1, std::memory_order_relaxed) + 1;
      t.comms->RecordPrint(t.slot, seq, "ncclAllReduce", 1 << 20, 7, 0, -1, 0);
    }
    state.ResumeTiming();
    t.comms->TakePrints([&](const CallPrintCopy&) { ++taken; }, &lost);
  }
  state.SetItemsProcessed(static_cast<int64_t>(taken));
}

BENCHMARK(BM_ClockRead);
BENCHMARK(BM_NumberOnly);
BENCHMARK(BM_NumberAndRecordPrint);
BENCHMARK(BM_TakePrintsPerCall);

}  // namespace
}  // namespace xtimer

BENCHMARK_MAIN();
