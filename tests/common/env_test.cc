#include "common/env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

namespace xtimer::env {
namespace {

TEST(Env, DefaultsComeFromTheTable) {
  unsetenv("XTIMER_HANG_TIMEOUT");
  EXPECT_DOUBLE_EQ(Double("XTIMER_HANG_TIMEOUT"), 300.0);
  EXPECT_EQ(String("XTIMER_HANG_ACTION"), "dump");
  EXPECT_TRUE(Bool("XTIMER_CKPT_PERSIST_ON_FAILURE"));
}

TEST(Env, UserValuesAreParsed) {
  setenv("XTIMER_HANG_TIMEOUT", "2.5", 1);
  EXPECT_DOUBLE_EQ(Double("XTIMER_HANG_TIMEOUT"), 2.5);
  setenv("XTIMER_KERNEL_SAMPLE", "16", 1);
  EXPECT_EQ(Int("XTIMER_KERNEL_SAMPLE"), 16);
  setenv("XTIMER_DISABLE", "Yes", 1);
  EXPECT_TRUE(Bool("XTIMER_DISABLE"));
  unsetenv("XTIMER_HANG_TIMEOUT");
  unsetenv("XTIMER_KERNEL_SAMPLE");
  unsetenv("XTIMER_DISABLE");
}

TEST(Env, BadValuesFallBackToTheDefault) {
  setenv("XTIMER_HANG_TIMEOUT", "5 minutes", 1);
  EXPECT_DOUBLE_EQ(Double("XTIMER_HANG_TIMEOUT"), 300.0);
  setenv("XTIMER_KERNEL_SAMPLE", "1e3", 1);
  EXPECT_EQ(Int("XTIMER_KERNEL_SAMPLE"), 1);
  setenv("XTIMER_DISABLE", "maybe", 1);
  EXPECT_FALSE(Bool("XTIMER_DISABLE"));
  unsetenv("XTIMER_HANG_TIMEOUT");
  unsetenv("XTIMER_KERNEL_SAMPLE");
  unsetenv("XTIMER_DISABLE");
}

TEST(Env, EmptyValueMeansDefault) {
  setenv("XTIMER_TIMELINE_PATH", "", 1);
  EXPECT_EQ(String("XTIMER_TIMELINE_PATH"), "/tmp/xtimer");
  unsetenv("XTIMER_TIMELINE_PATH");
}

// The seed's (xpu_timer's) names are read when ours are unset; ours win when both are set.
TEST(Env, SeedAliasesAreReadAndOursWin) {
  unsetenv("XTIMER_HANG_TIMEOUT");
  unsetenv("XTIMER_TIMELINE_PATH");
  setenv("XPU_TIMER_HANG_TIMEOUT", "7", 1);
  setenv("XPU_TIMER_TIMELINE_PATH", "/tmp/seed", 1);
  EXPECT_DOUBLE_EQ(Double("XTIMER_HANG_TIMEOUT"), 7.0);
  EXPECT_EQ(String("XTIMER_TIMELINE_PATH"), "/tmp/seed");
  setenv("XTIMER_HANG_TIMEOUT", "9", 1);
  setenv("XTIMER_TIMELINE_PATH", "/tmp/ours", 1);
  EXPECT_DOUBLE_EQ(Double("XTIMER_HANG_TIMEOUT"), 9.0);
  EXPECT_EQ(String("XTIMER_TIMELINE_PATH"), "/tmp/ours");
  setenv("XTIMER_HANG_TIMEOUT", "", 1);  // empty is unset: the alias counts again
  EXPECT_DOUBLE_EQ(Double("XTIMER_HANG_TIMEOUT"), 7.0);
  setenv("XPU_TIMER_HANG_TIMEOUT", "soon", 1);  // a bad alias value: the default
  EXPECT_DOUBLE_EQ(Double("XTIMER_HANG_TIMEOUT"), 300.0);
  for (const char* n : {"XTIMER_HANG_TIMEOUT", "XTIMER_TIMELINE_PATH", "XPU_TIMER_HANG_TIMEOUT", "XPU_TIMER_TIMELINE_PATH"})
    unsetenv(n);
  EXPECT_EQ(Find("XTIMER_HANG_TIMEOUT")->alias, std::string("XPU_TIMER_HANG_TIMEOUT"));
}

TEST(Env, FindKnowsEveryRowAndNothingElse) {
  for (const auto& v : All()) EXPECT_EQ(Find(v.name), &v);
  EXPECT_EQ(Find("NOT_A_KNOWN_VARIABLE"), nullptr);
}

}  // namespace
}  // namespace xtimer::env
