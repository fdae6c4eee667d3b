// Unit tests of the preload library's data structures (no CUDA involved).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "preload/base/mpmc_queue.h"
#include "preload/timing/call_sites.h"
#include "preload/timing/comm_table.h"
#include "preload/timing/histogram.h"
#include "preload/timing/one_event.h"
#include "preload/timing/op_class.h"

namespace xtimer {
namespace {

TEST(Histogram, QuantilesWithinTwoPercentOfExact) {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> dist(12.0, 1.5);  // ~160 us median, wide spread
  std::vector<uint64_t> xs;
  Histogram h;
  for (int i = 0; i < 100000; ++i) {
    uint64_t x = static_cast<uint64_t>(dist(rng)) + 1;
    xs.push_back(x);
    h.Add(x);
  }
  std::sort(xs.begin(), xs.end());
  for (double q : {0.01, 0.5, 0.9, 0.99, 0.999}) {
    double exact = static_cast<double>(xs[static_cast<size_t>(std::ceil(q * xs.size())) - 1]);
    EXPECT_NEAR(h.Quantile(q) / exact, 1.0, 0.02) << "q=" << q;
  }
  EXPECT_EQ(h.count(), xs.size());
  EXPECT_EQ(h.max_ns(), xs.back());
  EXPECT_EQ(h.min_ns(), xs.front());
}

TEST(Histogram, ConstantValueIsExact) {
  Histogram h;
  for (int i = 0; i < 10; ++i) h.Add(2000000);  // 2 ms
  EXPECT_DOUBLE_EQ(h.Quantile(0.5), 2000000);   // clamped to [min, max]
  EXPECT_DOUBLE_EQ(h.mean_ns(), 2000000);
}

TEST(Histogram, HugeAndTinyValuesDoNotOverflow) {
  Histogram h;
  h.Add(0);
  h.Add(1);
  h.Add(UINT64_MAX / 2);
  EXPECT_EQ(h.count(), 3u);
  EXPECT_GT(h.Quantile(1.0), 1e15);
  EXPECT_EQ(Histogram().Quantile(0.5), 0);
}

TEST(MpmcQueue, FifoAndBounded) {
  MpmcQueue<int> q(4);
  EXPECT_EQ(q.capacity(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(q.Push(i));
  EXPECT_FALSE(q.Push(99));  // full: refused, never blocks
  int v;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(q.Pop(&v));
    EXPECT_EQ(v, i);
  }
  EXPECT_FALSE(q.Pop(&v));
}

TEST(MpmcQueue, ConcurrentProducersLoseNothing) {
  MpmcQueue<uint64_t> q(1024);
  constexpr int kThreads = 4, kEach = 50000;
  std::atomic<int> done{0};
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t)
    producers.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i)
        while (!q.Push(static_cast<uint64_t>(t) << 32 | i)) std::this_thread::yield();
      done.fetch_add(1);
    });
  std::vector<int> next(kThreads, 0);
  uint64_t got = 0, v;
  while (got < static_cast<uint64_t>(kThreads) * kEach) {
    if (!q.Pop(&v)) continue;
    int t = static_cast<int>(v >> 32), i = static_cast<int>(v & 0xffffffff);
    ASSERT_EQ(i, next[t]) << "per-producer order broken";  // FIFO per producer
    ++next[t];
    ++got;
  }
  for (auto& p : producers) p.join();
  EXPECT_FALSE(q.Pop(&v));
}

TEST(OpClassTable, SameKeySameClassDifferentKeyDifferentClass) {
  auto table = std::make_unique<OpClassTable>();
  OpKey a{OpKind::kMatmul, "cublasGemmEx", nullptr, 4096, 4096, 4096, 1, 0};
  OpKey b = a;
  b.c = 1024;
  uint32_t ia = table->Intern(a), ib = table->Intern(b);
  EXPECT_NE(ia, ib);
  EXPECT_EQ(table->Intern(a), ia);
  EXPECT_TRUE(table->at(ia).key == a);
  EXPECT_TRUE(table->Ready(ia));
}

// Plain kernels are found in a per-thread cache: the same class as the table's, runtime stub and
// CUfunction of one address apart, two tables apart, colliding entries replaced, not confused.
TEST(OpClassTable, KernelCacheAgreesWithTheTable) {
  auto one = std::make_unique<OpClassTable>();
  auto two = std::make_unique<OpClassTable>();
  static char funcs[3][64 * 16];  // the last two map to the same cache entry as the first
  OpKey k{OpKind::kKernel, nullptr, &funcs[0][0], 0, 0, 0, 0, 0};
  OpKey driver = k;
  driver.a = 1;
  OpKey other{OpKind::kMatmul, "cublasGemmEx", nullptr, 8, 8, 8, 1, 0};
  two->Intern(other);  // the tables' ids for k differ
  const uint32_t id1 = one->Intern(k), id2 = two->Intern(k), idd = one->Intern(driver);
  EXPECT_NE(id1, id2);
  EXPECT_NE(id1, idd);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(one->Intern(k), id1);
    EXPECT_EQ(two->Intern(k), id2);
    EXPECT_EQ(one->Intern(driver), idd);
    OpKey collide = k;
    collide.func = &funcs[1 + i % 2][0];
    const uint32_t ic = one->Intern(collide);
    EXPECT_NE(ic, id1);
    EXPECT_TRUE(one->at(ic).key == collide);
  }
  EXPECT_TRUE(one->at(id1).key == k);
  EXPECT_TRUE(one->at(idd).key == driver);
}

TEST(OpClassTable, ConcurrentInternAgrees) {
  auto table = std::make_unique<OpClassTable>();
  constexpr int kThreads = 4, kKeys = 500;
  std::vector<std::vector<uint32_t>> ids(kThreads, std::vector<uint32_t>(kKeys));
  std::vector<std::thread> ts;
  static int funcs[kKeys];
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      for (int k = 0; k < kKeys; ++k) {
        OpKey key;
        key.func = &funcs[(k * 7 + t) % kKeys];
        ids[t][(k * 7 + t) % kKeys] = table->Intern(key);
      }
    });
  for (auto& t : ts) t.join();
  std::set<uint32_t> distinct;
  for (int k = 0; k < kKeys; ++k) {
    for (int t = 1; t < kThreads; ++t) ASSERT_EQ(ids[t][k], ids[0][k]) << "key " << k;
    distinct.insert(ids[0][k]);
  }
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kKeys));
}

TEST(OpClassTable, FullTableFallsBackToOverflowClass) {
  auto table = std::make_unique<OpClassTable>();
  static char funcs[OpClassTable::kMaxClasses + 100];
  uint32_t last = 0;
  for (size_t i = 0; i < sizeof funcs; ++i) {
    OpKey key;
    key.func = &funcs[i];
    last = table->Intern(key);
  }
  EXPECT_EQ(last, static_cast<uint32_t>(OpKind::kKernel));  // "(other kernel)"
  EXPECT_EQ(table->size(), OpClassTable::kMaxClasses);
}

TEST(CommTable, IdsAgreeForTheSameKeyAndRegistrationsAreFound) {
  auto comms = std::make_unique<CommTable>();
  unsigned char uid[128] = {1, 2, 3};
  int a = comms->Register(reinterpret_cast<void*>(0x10), uid, sizeof uid, 0, 4, 0);
  int b = comms->Register(reinterpret_cast<void*>(0x20), uid, sizeof uid, 1, 4, 0);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  EXPECT_STREQ(comms->at(a).id, comms->at(b).id);  // what two ranks of one communicator compute
  EXPECT_EQ(comms->Find(reinterpret_cast<void*>(0x20)), b);
  EXPECT_EQ(comms->Find(reinterpret_cast<void*>(0x30)), -1);
  comms->Forget(reinterpret_cast<void*>(0x10));
  EXPECT_EQ(comms->Find(reinterpret_cast<void*>(0x10)), -1);
  uid[0] = 9;
  int c = comms->Register(reinterpret_cast<void*>(0x10), uid, sizeof uid, 0, 8, 0);
  EXPECT_STRNE(comms->at(c).id, comms->at(b).id);
  EXPECT_EQ(comms->at(comms->Largest()).size, 8);
  comms->Forget(reinterpret_cast<void*>(0x10));  // destroyed at exit: still the rank's identity
  EXPECT_EQ(comms->at(comms->Largest()).size, 8);
}

// Collective fingerprints (comm_table.h): the launch path writes, one reader takes every one in
// order, a ring that went round counts what it lost, and a reader racing the writer never takes
// a torn slot (each field is derived from the sequence number, so a mix shows).
TEST(CommTable, FingerprintsAreTakenInOrderAndNeverTorn) {
  auto comms = std::make_unique<CommTable>();
  comms->EnablePrints(true);
  unsigned char uid[128] = {7};
  int slot = comms->Register(reinterpret_cast<void*>(0x10), uid, sizeof uid, 0, 4, 0);
  ASSERT_GE(slot, 0);
  Comm& c = comms->at(slot);
  auto issue = [&](uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t seq = c.collective_seq.fetch_add(1) + 1;
      comms->RecordPrint(slot, seq, "ncclAllReduce", seq * 3, int(seq % 7), int(seq % 5), -1, uint32_t(seq % 3));
    }
  };
  std::vector<CallPrintCopy> got;
  uint64_t lost = 0;
  auto take = [&] { comms->TakePrints([&](const CallPrintCopy& p) { got.push_back(p); }, &lost); };
  issue(10);
  take();
  ASSERT_EQ(got.size(), 10u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].seq, i + 1);
    EXPECT_EQ(got[i].count, (i + 1) * 3);
    EXPECT_STREQ(got[i].api, "ncclAllReduce");
    EXPECT_EQ(got[i].comm_slot, slot);
  }
  got.clear();
  issue(CommTable::kPrintSlots + 50);  // more than the ring holds before the reader comes
  take();
  EXPECT_EQ(lost, 50u);
  ASSERT_EQ(got.size(), CommTable::kPrintSlots);
  EXPECT_EQ(got.front().seq, 10 + 50 + 1u);

  // A writer racing the reader.
  got.clear();
  lost = 0;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    issue(200000);
    done = true;
  });
  while (!done) take();
  take();
  writer.join();
  uint64_t prev = 0;
  for (const CallPrintCopy& p : got) {
    ASSERT_GT(p.seq, prev);
    prev = p.seq;
    ASSERT_EQ(p.count, p.seq * 3);
    ASSERT_EQ(p.dtype, int(p.seq % 7));
    ASSERT_EQ(p.redop, int(p.seq % 5));
    ASSERT_EQ(p.site, uint32_t(p.seq % 3));
  }
  EXPECT_EQ(got.size() + lost, 200000u);
  // Switched off: nothing recorded or taken.
  auto off = std::make_unique<CommTable>();
  int s2 = off->Register(reinterpret_cast<void*>(0x10), uid, sizeof uid, 0, 4, 0);
  off->RecordPrint(s2, 1, "ncclAllReduce", 1, 0, 0, -1, 0);
  off->at(s2).collective_seq = 1;
  size_t n = 0;
  off->TakePrints([&](const CallPrintCopy&) { ++n; }, &lost);
  EXPECT_EQ(n, 0u);
}

// Call sites (call_sites.h): registered once, named by id; a thread's own site wins over the
// backward site, which every thread without one sees; each swap hands back what it replaced.
TEST(CallSites, ThreadSiteWinsOverTheBackwardSite) {
  const uint32_t a = sites::Register("clip_grads (train.py:88)");
  const uint32_t b = sites::Register("main (train.py:120)");
  ASSERT_NE(a, 0u);
  ASSERT_NE(b, a);
  EXPECT_STREQ(sites::Text(a), "clip_grads (train.py:88)");
  EXPECT_EQ(sites::Text(0), nullptr);
  EXPECT_EQ(sites::Text(sites::kMaxSites + 1), nullptr);
  EXPECT_EQ(sites::Register(""), 0u);
  EXPECT_EQ(sites::Current(), 0u);
  EXPECT_EQ(sites::SwapBackwardSite(b), 0u);
  EXPECT_EQ(sites::Current(), b);
  EXPECT_EQ(sites::SwapThreadSite(a), 0u);
  EXPECT_EQ(sites::Current(), a);
  uint32_t seen_elsewhere = 0;
  std::thread([&] { seen_elsewhere = sites::Current(); }).join();
  EXPECT_EQ(seen_elsewhere, b);  // the reducer's thread: the backward site
  EXPECT_EQ(sites::SwapThreadSite(0), a);
  EXPECT_EQ(sites::SwapBackwardSite(0), b);
  EXPECT_EQ(sites::Current(), 0u);
  std::string longer(400, 'x');
  EXPECT_EQ(std::string(sites::Text(sites::Register(longer.c_str()))).size(), sites::kMaxText - 1);
}

// A kernel timed by its end event alone (preload/one_event.h): queued behind a running op it
// starts at that op's end; launched after the stream went idle, at its launch; after an untimed
// launch of its thread, when nobody knows.
TEST(OneEvent, StartIsThePreviousEndWhileBusyElseTheLaunch) {
  StreamTail tail;
  EXPECT_EQ(DeriveStart(tail, 1000, false), StartFrom::kLaunch);  // first op on the stream
  tail.end_event = 7;
  tail.end_ns = 5000;
  EXPECT_EQ(DeriveStart(tail, 4000, false), StartFrom::kPreviousEnd);  // launched while it ran
  EXPECT_EQ(DeriveStart(tail, 6000, false), StartFrom::kLaunch);       // launched after it ended
  EXPECT_EQ(DeriveStart(tail, 5000, false), StartFrom::kLaunch);       // at its end: either is right
  EXPECT_EQ(DeriveStart(tail, 4000, true), StartFrom::kUnknown);       // an untimed launch between
  EXPECT_EQ(DeriveStart(tail, 6000, true), StartFrom::kUnknown);
  tail.end_ns = 0;  // the previous end could not be placed on the host clock
  EXPECT_EQ(DeriveStart(tail, 4000, false), StartFrom::kLaunch);
  tail.end_ns = 5000;
  tail.end_event = kNoEvent;  // its event was given back: no GPU time to measure from
  EXPECT_EQ(DeriveStart(tail, 4000, false), StartFrom::kLaunch);
}

}  // namespace
}  // namespace xtimer
