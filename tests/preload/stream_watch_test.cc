// Unit tests of StreamWatch (preload/stream_watch.h): which streams have unfinished work and how
// long since each made progress, from launches (CUPTI's callbacks) and records, with a fake
// Probe in place of CUDA. No CUDA involved.
#include "preload/timing/stream_watch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"

namespace xtimer {
namespace {

// The fake CUDA: what a stream query answers, and who was asked.
std::atomic<int> g_idle{0};
std::atomic<bool> g_capturing{false};
std::atomic<int> g_queries{0};
std::atomic<void*> g_asked_stream{nullptr};
std::atomic<void*> g_asked_context{nullptr};

const StreamWatch::Probe kProbe = {
    [](void* stream, void* context) {
      ++g_queries;
      g_asked_stream = stream;
      g_asked_context = context;
      return g_idle.load();
    },
    [](const void* func, int how) {
      return "kernel" + std::to_string(reinterpret_cast<uintptr_t>(func)) + "/" + std::to_string(how);
    },
    [] { return g_capturing.load(); },
};

constexpr uint64_t kSecond = 1000000000ull;
void* const kStreamA = reinterpret_cast<void*>(0x1000);
void* const kStreamB = reinterpret_cast<void*>(0x2000);
void* const kContext = reinterpret_cast<void*>(0x7000);

class Watch : public ::testing::Test {
 protected:
  void SetUp() override {
    g_idle = 0;
    g_capturing = false;
    g_queries = 0;
    watch_ = std::make_unique<StreamWatch>(kProbe);
  }
  void Launch(void* stream, uint32_t correlation, uintptr_t func = 1, LaunchKind kind = LaunchKind::kDriverKernel,
              bool per_thread = false) {
    StreamLaunch l;
    l.stream = stream;
    l.per_thread = per_thread;
    l.context = kContext;
    l.correlation = correlation;
    l.func = reinterpret_cast<const void*>(func);
    l.kind = kind;
    l.api = kind == LaunchKind::kGraph ? "cuGraphLaunch" : nullptr;
    watch_->OnLaunched(watch_->OnLaunchEntry(l), l.correlation);
  }
  InflightOps Inflight() {
    InflightOps ops;
    watch_->AppendInflight(&ops);
    return ops;
  }
  std::unique_ptr<StreamWatch> watch_;
};

TEST_F(Watch, AStreamWhoseLastLaunchHasNoRecordIsStalledSinceItsLaunch) {
  const uint64_t t0 = MonotonicNs();
  Launch(kStreamA, 10, 42);
  watch_->AfterFlush(t0, 100);  // the flush that first sees the launch
  watch_->AfterFlush(t0 + 3 * kSecond, 100);
  InflightOps ops = Inflight();
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].name, "kernel42/1") << "named by the probe, as a driver CUfunction";
  EXPECT_EQ(ops[0].stream, 0x1000u);
  EXPECT_TRUE(ops[0].running && ops[0].last_on_stream);
  EXPECT_NEAR(ops[0].in_flight_s, 3.0, 0.1) << "no progress since the launch was seen, as of the latest flush";
  EXPECT_EQ(g_queries, 0) << "not asked before it looks stalled for confirm_after_s";
}

// A kernel that never ends: the host goes on launching behind it, and the stream is named at
// the oldest launch that has not finished (the one it waits at), not at the last one.
TEST_F(Watch, AStalledStreamIsNamedAtItsOldestUnfinishedLaunch) {
  const uint64_t t0 = MonotonicNs();
  Launch(kStreamA, 10, 41);
  Launch(kStreamA, 11, 42);  // the one that never ends
  Launch(kStreamB, 12, 50);
  Launch(kStreamA, 13, 43);
  watch_->OnRecord(1, 7, 10, t0);
  watch_->OnRecord(1, 8, 12, t0);
  watch_->AfterFlush(t0 + 3 * kSecond, 100);
  InflightOps ops = Inflight();
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].name, "kernel42/1");
  EXPECT_TRUE(ops[0].head_of_stream);
  // Once it ends, the next unfinished one is the head.
  watch_->OnRecord(1, 7, 11, t0 + 4 * kSecond);
  watch_->AfterFlush(t0 + 5 * kSecond, 100);
  ops = Inflight();
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].name, "kernel43/1");
}

TEST_F(Watch, TheRecordOfTheLastLaunchCatchesTheStreamUp) {
  const uint64_t t0 = MonotonicNs();
  Launch(kStreamA, 10);
  Launch(kStreamA, 11);
  watch_->OnRecord(1, 7, 10, t0 + kSecond);
  watch_->AfterFlush(t0 + 2 * kSecond, 100);
  InflightOps ops = Inflight();
  ASSERT_EQ(ops.size(), 1u) << "the first kernel's end is progress, not the end of the second";
  EXPECT_NEAR(ops[0].in_flight_s, 1.0, 0.01) << "stalled since the first kernel ended";
  watch_->OnRecord(1, 7, 11, t0 + 2 * kSecond);
  watch_->AfterFlush(t0 + 3 * kSecond, 100);
  EXPECT_TRUE(Inflight().empty());
}

TEST_F(Watch, ACaughtUpStreamIsStalledOnlyFromItsNextLaunch) {
  const uint64_t t0 = MonotonicNs();
  Launch(kStreamA, 10);
  watch_->OnRecord(1, 7, 10, t0);
  watch_->AfterFlush(t0 + 5 * kSecond, 100);  // idle for 5 s
  Launch(kStreamA, 12);
  watch_->AfterFlush(t0 + 6 * kSecond, 100);
  InflightOps ops = Inflight();
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_NEAR(ops[0].in_flight_s, 1.0, 0.01) << "counted from the flush that found it caught up, not its last record";
}

TEST_F(Watch, RecordsOfLaunchesTheRingForgotMatchByTheirStream) {
  const uint64_t t0 = MonotonicNs();
  Launch(kStreamA, 5);
  watch_->OnRecord(1, 7, 5, t0);  // learns that CUPTI's (1, 7) is stream A
  Launch(kStreamA, 6);
  Launch(kStreamB, 6 + StreamWatch::kRing);  // takes correlation 6's place in the ring
  watch_->OnRecord(1, 7, 6, t0 + kSecond);
  watch_->AfterFlush(t0 + 2 * kSecond, 100);
  InflightOps ops = Inflight();
  ASSERT_EQ(ops.size(), 1u) << "A caught up through its stream id; B still waits";
  EXPECT_EQ(ops[0].stream, 0x2000u);
  EXPECT_EQ(watch_->StreamOf(1, 7, 99), 0x1000u) << "CUPTI's stream id maps to the handle";
  EXPECT_EQ(watch_->StreamOf(1, 8, 99), 99u);
}

TEST_F(Watch, CorrelationIdsThatWrapStillOrder) {
  const uint64_t t0 = MonotonicNs();
  Launch(kStreamA, 0xfffffffeu);
  Launch(kStreamA, 3);  // after the wrap
  watch_->OnRecord(1, 7, 0xfffffffeu, t0);
  watch_->AfterFlush(t0 + kSecond, 100);
  EXPECT_EQ(Inflight().size(), 1u) << "3 came after 0xfffffffe";
  watch_->OnRecord(1, 7, 3, t0 + kSecond);
  watch_->AfterFlush(t0 + 2 * kSecond, 100);
  EXPECT_TRUE(Inflight().empty());
}

TEST_F(Watch, AStalledStreamIsAskedAndAnIdleAnswerMeansItsRecordsWereLost) {
  const uint64_t t0 = MonotonicNs();
  Launch(kStreamA, 10);
  g_idle = 1;
  watch_->AfterFlush(t0, 1.0);
  EXPECT_EQ(g_queries, 0) << "just launched";
  watch_->AfterFlush(t0 + 2 * kSecond, 1.0);
  EXPECT_EQ(g_queries, 1);
  EXPECT_EQ(g_asked_stream.load(), kStreamA);
  EXPECT_TRUE(Inflight().empty());
  EXPECT_EQ(watch_->records_missed(), 1u);

  Launch(kStreamA, 11);
  g_idle = 0;
  watch_->AfterFlush(t0 + 3 * kSecond, 1.0);
  watch_->AfterFlush(t0 + 5 * kSecond, 1.0);
  EXPECT_EQ(g_queries, 3) << "asked at each flush while it looks stalled";
  ASSERT_EQ(Inflight().size(), 1u) << "busy: confirmed";
  EXPECT_NEAR(Inflight()[0].in_flight_s, 3.0, 0.01) << "since it was last found caught up";
}

TEST_F(Watch, TheLegacyStreamIsAskedThroughItsContext) {
  const uint64_t t0 = MonotonicNs();
  Launch(nullptr, 10);
  watch_->AfterFlush(t0, 1.0);
  watch_->AfterFlush(t0 + 2 * kSecond, 1.0);
  EXPECT_EQ(g_queries, 1);
  EXPECT_EQ(g_asked_stream.load(), nullptr);
  EXPECT_EQ(g_asked_context.load(), kContext);
}

TEST_F(Watch, NoQueryDuringACaptureNorOfAPerThreadStreamNorOfADestroyedOne) {
  const uint64_t t0 = MonotonicNs();
  g_idle = 0;
  g_capturing = true;
  Launch(kStreamA, 10);
  watch_->AfterFlush(t0, 1.0);
  watch_->AfterFlush(t0 + 2 * kSecond, 1.0);
  EXPECT_EQ(g_queries, 0) << "a query would invalidate a capture";
  EXPECT_EQ(Inflight().size(), 1u) << "the records are trusted";
  g_capturing = false;

  Launch(nullptr, 11, 1, LaunchKind::kRuntimeKernel, true);
  Launch(kStreamB, 12);
  watch_->OnDestroy(kStreamB, false, kContext);
  watch_->AfterFlush(t0 + 3 * kSecond, 1.0);
  g_queries = 0;
  watch_->AfterFlush(t0 + 5 * kSecond, 1.0);
  EXPECT_EQ(g_queries, 1) << "only stream A, not the per-thread stream nor the destroyed one";
  EXPECT_EQ(g_asked_stream.load(), kStreamA);
  EXPECT_EQ(Inflight().size(), 3u);
}

TEST_F(Watch, GraphLaunchesAreNamedByTheirApi) {
  Launch(kStreamA, 10, 5, LaunchKind::kGraph);
  watch_->AfterFlush(MonotonicNs() + kSecond, 100);
  InflightOps ops = Inflight();
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].name, "cuGraphLaunch");
}

TEST_F(Watch, StreamsBeyondTheTableAreCounted) {
  for (uint32_t i = 0; i < StreamWatch::kSlots + 3; ++i)
    Launch(reinterpret_cast<void*>(0x10000 + 0x100 * uintptr_t(i)), i + 1);
  EXPECT_EQ(watch_->untracked(), 3u);
  watch_->AfterFlush(MonotonicNs() + kSecond, 100);
  EXPECT_EQ(Inflight().size(), StreamWatch::kSlots);
}

TEST_F(Watch, ARecordThatComesBackBeforeTheLaunchCallbackEndsStillCounts) {
  StreamLaunch l;
  l.stream = kStreamA;
  l.context = kContext;
  l.correlation = 10;
  const uint32_t token = watch_->OnLaunchEntry(l);
  watch_->OnRecord(1, 7, 10, MonotonicNs());  // the kernel ended before the launch call returned
  watch_->OnLaunched(token, l.correlation);
  watch_->AfterFlush(MonotonicNs() + kSecond, 100);
  EXPECT_TRUE(Inflight().empty());
}

// Launching threads race the poller (run under TSan in build-tsan), and records may come back
// before a launch's exit: when every launch's record has arrived, no stream is left stalled.
TEST_F(Watch, ConcurrentLaunchesAndRecords) {
  constexpr int kThreads = 4, kStreams = 8, kPerThread = 20000;
  std::atomic<uint32_t> next{1};
  std::mutex records_mu;                               // CUPTI's buffers: records in the order their launches entered
  std::vector<std::pair<uint32_t, uint32_t>> records;  // (stream index, correlation)
  std::atomic<bool> done{false};
  std::thread poller([&] {
    while (!done.load()) {
      std::vector<std::pair<uint32_t, uint32_t>> batch;
      {
        std::lock_guard lk(records_mu);
        batch.swap(records);
      }
      for (auto [s, c] : batch) watch_->OnRecord(1, s + 1, c, MonotonicNs());
      watch_->AfterFlush(MonotonicNs(), 100);
      InflightOps ops;
      watch_->AppendInflight(&ops);
    }
  });
  std::vector<std::thread> launchers;
  for (int t = 0; t < kThreads; ++t)
    launchers.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        StreamLaunch l;
        const uint32_t s = static_cast<uint32_t>((t + i) % kStreams);
        l.stream = reinterpret_cast<void*>(0x10000 + 0x100 * uintptr_t(s));
        l.context = kContext;
        l.func = reinterpret_cast<const void*>(uintptr_t(i));
        uint32_t token;
        {
          std::lock_guard lk(records_mu);
          l.correlation = next.fetch_add(1);
          token = watch_->OnLaunchEntry(l);
          records.emplace_back(s, l.correlation);
        }
        watch_->OnLaunched(token, l.correlation);
      }
    });
  for (auto& th : launchers) th.join();
  done = true;
  poller.join();
  for (auto [s, c] : records) watch_->OnRecord(1, s + 1, c, MonotonicNs());
  watch_->AfterFlush(MonotonicNs(), 100);
  EXPECT_TRUE(Inflight().empty());
  EXPECT_EQ(watch_->untracked(), 0u);
}

}  // namespace
}  // namespace xtimer
