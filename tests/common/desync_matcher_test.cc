// The comparison of collective fingerprints (common/desync/matcher.h) on hand-made calls.
#include <gtest/gtest.h>

#include "common/desync/matcher.h"

namespace xtimer::desync {
namespace {

Fingerprint AllReduce(uint64_t seq, uint64_t count, std::string site = "", std::string comm = "c0ffee00",
                      int size = 4) {
  Fingerprint f;
  f.comm = std::move(comm);
  f.comm_size = size;
  f.seq = seq;
  f.op = "AllReduce";
  f.count = count;
  f.dtype = 7;  // float32
  f.redop = 0;
  f.site = std::move(site);
  return f;
}

TEST(DesyncMatcher, AgreeingRanksNameNothingAndHoldNothing) {
  Matcher m;
  for (uint64_t seq = 1; seq <= 100; ++seq)
    for (int r = 0; r < 4; ++r) m.Add(r, AllReduce(seq, 1024), 0);
  EXPECT_TRUE(m.Take(10'000).empty());
  EXPECT_EQ(m.pending(), 0u);
}

TEST(DesyncMatcher, AnotherSizeNamesTheOddRankWithBothSides) {
  Matcher m;
  for (int r = 0; r < 4; ++r) m.Add(r, AllReduce(5, r == 1 ? 1u << 20 : 2u << 20, r == 1 ? "clip (t.py:88)" : ""), 0);
  auto found = m.Take(0);  // complete: no need to wait for the grace
  ASSERT_EQ(found.size(), 1u);
  EXPECT_TRUE(found[0].complete);
  EXPECT_EQ(found[0].seq, 5u);
  EXPECT_EQ(found[0].suspects, (std::vector<int32_t>{1}));
  ASSERT_EQ(found[0].sides.size(), 2u);
  EXPECT_EQ(found[0].sides[0].ranks, (std::vector<int32_t>{0, 2, 3}));
  EXPECT_EQ(found[0].Line(),
            "rank 1 called AllReduce #5 of 4 MiB (1048576 x float32) at clip (t.py:88); "
            "ranks 0/2-3 called AllReduce #5 of 8 MiB (2097152 x float32)");
  // Reported once: later calls of that communicator are shifted and not compared again.
  for (int r = 0; r < 4; ++r) m.Add(r, AllReduce(6, r == 1 ? 1 : 2), 0);
  EXPECT_TRUE(m.Take(10'000).empty());
}

TEST(DesyncMatcher, AnotherOperationIsADifference) {
  Matcher m;
  for (int r = 0; r < 4; ++r) {
    Fingerprint f = AllReduce(3, 256);
    if (r == 3) {
      f.op = "AllGather";
      f.redop = -1;
    }
    m.Add(r, f, 0);
  }
  auto found = m.Take(0);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].suspects, (std::vector<int32_t>{3}));
  EXPECT_EQ(found[0].sides[1].call.op, "AllGather");
}

TEST(DesyncMatcher, ASameSizeSkipIsToldByItsCallSite) {
  Matcher m;
  // Rank 2 skips clip's all-reduce #5: its #5 is sync's, the others' #5 is clip's.
  for (int r = 0; r < 4; ++r) m.Add(r, AllReduce(5, 1024, r == 2 ? "sync (t.py:91)" : "clip (t.py:88)"), 0);
  auto found = m.Take(0);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].suspects, (std::vector<int32_t>{2}));
  // Without call sites the same skip cannot be told apart (docs/formats.md says so).
  Matcher blind;
  for (int r = 0; r < 4; ++r) blind.Add(r, AllReduce(5, 1024), 0);
  EXPECT_TRUE(blind.Take(10'000).empty());
}

TEST(DesyncMatcher, APartialDifferenceWaitsForTheGraceThenDecides) {
  Matcher m(MatcherOptions{.grace_ms = 500});
  m.Add(0, AllReduce(7, 10), 1000);
  m.Add(1, AllReduce(7, 20), 1000);
  m.Add(2, AllReduce(7, 10), 1100);  // rank 3 is on another node, or never calls
  EXPECT_TRUE(m.Take(1400).empty());
  auto found = m.Take(1500);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_FALSE(found[0].complete);
  EXPECT_EQ(found[0].suspects, (std::vector<int32_t>{1}));
}

TEST(DesyncMatcher, OnlyMembersOfASubCommunicatorAreCompared) {
  Matcher m;
  // Two tensor-parallel groups of two; each all-reduces its own size: no difference.
  for (int r = 0; r < 4; ++r) m.Add(r, AllReduce(1, r < 2 ? 100 : 200, "", r < 2 ? "tp000000" : "tp000001", 2), 0);
  EXPECT_TRUE(m.Take(10'000).empty());
  EXPECT_EQ(m.pending(), 0u);
  // Within group 1, rank 3 differs: only 2 and 3 are sides.
  m.Add(2, AllReduce(2, 200, "", "tp000001", 2), 0);
  m.Add(3, AllReduce(2, 300, "", "tp000001", 2), 0);
  auto found = m.Take(0);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].comm, "tp000001");
  ASSERT_EQ(found[0].sides.size(), 2u);
  EXPECT_EQ(found[0].sides[0].ranks, (std::vector<int32_t>{2}));  // a tie: the lowest rank's side is the majority
  EXPECT_EQ(found[0].suspects, (std::vector<int32_t>{3}));
}

TEST(DesyncMatcher, MemoryIsBounded) {
  Matcher m(MatcherOptions{.grace_ms = 500, .window = 64, .max_comms = 8});
  // Rank 3 never reports (another node): seqs stay pending but only `window` of them.
  for (uint64_t seq = 1; seq <= 1000; ++seq)
    for (int r = 0; r < 3; ++r) m.Add(r, AllReduce(seq, 1), 0);
  EXPECT_LE(m.pending(), 64u);
  for (int c = 0; c < 100; ++c) m.Add(0, AllReduce(1, 1, "", "comm" + std::to_string(c), 2), 0);
  EXPECT_LE(m.pending(), 64u + 8u);
  EXPECT_TRUE(m.Take(10'000).empty());
}

TEST(DesyncMatcher, BadInputIsIgnored) {
  Matcher m;
  m.Add(0, AllReduce(0, 1), 0);          // no sequence number
  m.Add(0, AllReduce(1, 1, "", ""), 0);  // no communicator
  EXPECT_EQ(m.pending(), 0u);
  EXPECT_EQ(DtypeName(99), "dtype 99");
}

}  // namespace
}  // namespace xtimer::desync
