// Who this process is (common/identity.h): the rank variables read one way for every component,
// and the preload's defaults for what they do not say (preload/inflight_op.h).
#include "common/identity.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "preload/base/inflight_op.h"

namespace xtimer {
namespace {

class RankVars : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Clear() {
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("LOCAL_RANK");
  }
  static void Set(const char* rank, const char* world, const char* local) {
    setenv("RANK", rank, 1);
    setenv("WORLD_SIZE", world, 1);
    setenv("LOCAL_RANK", local, 1);
  }
};

TEST_F(RankVars, ALaunchersValuesAreRead) {
  Set("3", "8", "1");
  RankEnv e = ReadRankEnv();
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_TRUE(e.has_rank());
  RankInfo r = RankFromEnv();
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.world_size, 8);
  EXPECT_EQ(r.local_rank, 1);
}

TEST_F(RankVars, UnsetIsMinusOneAndThePreloadTakesRankZeroOfOne) {
  RankEnv e = ReadRankEnv();
  EXPECT_EQ(e.rank, -1);
  EXPECT_EQ(e.world_size, -1);
  EXPECT_EQ(e.local_rank, -1);
  EXPECT_FALSE(e.has_rank());
  RankInfo r = RankFromEnv();
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.world_size, 1);
  EXPECT_EQ(r.local_rank, -1);
}

TEST_F(RankVars, AnythingButAWholeNonNegativeNumberIsNotARank) {
  for (const char* bad : {"", "-1", " 3", "3 ", "3x", "+3", "0x10", "99999999999", "1e3"}) {
    Set(bad, bad, bad);
    RankEnv e = ReadRankEnv();
    EXPECT_EQ(e.rank, -1) << "'" << bad << "'";
    EXPECT_EQ(e.world_size, -1) << "'" << bad << "'";
    EXPECT_EQ(e.local_rank, -1) << "'" << bad << "'";
    EXPECT_EQ(RankFromEnv().rank, 0) << "'" << bad << "'";
  }
  Set("0", "0", "0");
  RankEnv e = ReadRankEnv();
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, -1) << "a world of 0 ranks is no world";
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_FALSE(e.has_rank());
}

TEST(HostName, IsTheKernelsName) {
  char buf[256] = {};
  ASSERT_EQ(gethostname(buf, sizeof buf - 1), 0);
  EXPECT_EQ(HostName(), buf);
  EXPECT_FALSE(HostName().empty());
}

}  // namespace
}  // namespace xtimer
