#include "common/env.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "common/log.h"
#include "preload/base/config.h"

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
  for (const char* n :
       {"XTIMER_HANG_TIMEOUT", "XTIMER_TIMELINE_PATH", "XPU_TIMER_HANG_TIMEOUT", "XPU_TIMER_TIMELINE_PATH"})
    unsetenv(n);
  EXPECT_EQ(Find("XTIMER_HANG_TIMEOUT")->alias, std::string("XPU_TIMER_HANG_TIMEOUT"));
}

TEST(Env, FindKnowsEveryRowAndNothingElse) {
  for (const auto& v : All()) EXPECT_EQ(Find(v.name), &v);
  EXPECT_EQ(Find("NOT_A_KNOWN_VARIABLE"), nullptr);
}

// Out-of-range numbers warn as docs/config.md promises and take the default (they used to be
// clamped without a word: XTIMER_KERNEL_SAMPLE=-1 quietly timed no kernel at all).
TEST(Env, OutOfRangeNumbersWarnAndTakeTheDefault) {
  struct Case {
    const char* name;
    const char* value;
    int64_t lo, hi, want;
  } cases[] = {{"XTIMER_MAX_INFLIGHT", "-5", 64, 1 << 22, 65536},
               {"XTIMER_TRACE", "-1", 0, 1 << 24, 0},
               {"XTIMER_KERNEL_SAMPLE", "-1", 0, INT32_MAX, 1},
               {"XTIMER_MAX_INFLIGHT", "99999999999", 64, 1 << 22, 65536}};
  for (const Case& c : cases) {
    setenv(c.name, c.value, 1);
    testing::internal::CaptureStderr();
    EXPECT_EQ(Int(c.name, c.lo, c.hi), c.want) << c.name << "=" << c.value;
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find(std::string(c.name) + "=" + c.value + " is not an integer in ["), std::string::npos) << err;
    EXPECT_NE(err.find("using the default"), std::string::npos) << err;
    unsetenv(c.name);
  }
  setenv("XTIMER_TRACE", "100", 1);  // in range: no word
  testing::internal::CaptureStderr();
  EXPECT_EQ(Int("XTIMER_TRACE", 0, 1 << 24), 100);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  setenv("XTIMER_REPORT_INTERVAL", "-3", 1);
  testing::internal::CaptureStderr();
  EXPECT_DOUBLE_EQ(Double("XTIMER_REPORT_INTERVAL", 0, 1e9), 30.0);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("XTIMER_REPORT_INTERVAL=-3 is not a number in"),
            std::string::npos);
  unsetenv("XTIMER_TRACE");
  unsetenv("XTIMER_REPORT_INTERVAL");
}

// What the preloaded library makes of out-of-range values (preload/config.cc reads through env).
TEST(Env, PreloadConfigTakesDefaultsForOutOfRangeValues) {
  setenv("XTIMER_MAX_INFLIGHT", "-5", 1);
  setenv("XTIMER_TRACE", "-1", 1);
  setenv("XTIMER_KERNEL_SAMPLE", "-1", 1);
  testing::internal::CaptureStderr();
  PreloadConfig c = PreloadConfig::FromEnv();
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(c.max_inflight, 65536);
  EXPECT_EQ(c.trace_ops, 0);
  EXPECT_EQ(c.kernel_sample, 1);  // every kernel timed, as by default; -1 meant "none" before
  for (const char* n : {"XTIMER_MAX_INFLIGHT=-5", "XTIMER_TRACE=-1", "XTIMER_KERNEL_SAMPLE=-1"})
    EXPECT_NE(err.find(n), std::string::npos) << n << " not reported in: " << err;
  for (const char* n : {"XTIMER_MAX_INFLIGHT", "XTIMER_TRACE", "XTIMER_KERNEL_SAMPLE"}) unsetenv(n);
}

// Default* give the table's value whatever the environment says: the structs start from them.
TEST(Env, DefaultIgnoresTheEnvironment) {
  setenv("XTIMER_HANG_TIMEOUT", "7", 1);
  setenv("XTIMER_STEPS", "0", 1);
  EXPECT_STREQ(Default("XTIMER_HANG_TIMEOUT"), Find("XTIMER_HANG_TIMEOUT")->default_value);
  EXPECT_DOUBLE_EQ(DefaultDouble("XTIMER_HANG_TIMEOUT"), 300.0);
  EXPECT_EQ(DefaultInt("XTIMER_MAX_INFLIGHT"), 65536);
  EXPECT_TRUE(DefaultBool("XTIMER_STEPS"));
  EXPECT_STREQ(Default("XTIMER_COLLECTOR"), "");
  PreloadConfig plain;  // not FromEnv: the table's defaults, not the environment's values
  EXPECT_DOUBLE_EQ(plain.hang_timeout_s, 300.0);
  EXPECT_TRUE(plain.steps);
  EXPECT_EQ(plain.timeline_path, "/tmp/xtimer");
  unsetenv("XTIMER_HANG_TIMEOUT");
  unsetenv("XTIMER_STEPS");
}

// A hang timeout that parses but is not > 0 falls back to the table's default and says which.
TEST(Env, PreloadConfigRejectsANonPositiveHangTimeout) {
  setenv("XTIMER_HANG_TIMEOUT", "0", 1);
  setenv("XTIMER_HANG_ACTION", "explode", 1);
  testing::internal::CaptureStderr();
  PreloadConfig c = PreloadConfig::FromEnv();
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_DOUBLE_EQ(c.hang_timeout_s, DefaultDouble("XTIMER_HANG_TIMEOUT"));
  EXPECT_EQ(c.hang_action, HangAction::kDump);
  EXPECT_NE(err.find("XTIMER_HANG_TIMEOUT must be > 0; using the default 300"), std::string::npos) << err;
  EXPECT_NE(err.find("XTIMER_HANG_ACTION=explode is not dump, abort, log or restart; using the default dump"),
            std::string::npos)
      << err;
  unsetenv("XTIMER_HANG_TIMEOUT");
  unsetenv("XTIMER_HANG_ACTION");
}

TEST(Env, LogLevelWords) {
  int level = -1;
  EXPECT_TRUE(ParseLogLevel("WARN", &level));
  EXPECT_EQ(level, 1);
  EXPECT_TRUE(ParseLogLevel("debug", &level));
  EXPECT_EQ(level, 3);
  EXPECT_FALSE(ParseLogLevel("xyz", &level));
  EXPECT_FALSE(ParseLogLevel("", &level));
}

// The level is read once per process: each case runs in a fresh process (gtest's "threadsafe"
// death-test style re-executes the test binary), so earlier tests' messages cannot have read it.
void LogThreeLines(const char* level) {
  setenv("XTIMER_LOG_LEVEL", level, 1);
  Log(LogLevel::kInfo, "an info line");
  Log(LogLevel::kDebug, "a debug line");
  Log(LogLevel::kInfo, "another info line");
  _exit(0);
}

// XTIMER_LOG_LEVEL=xyz: one warning, then info messages print (the default) and debug ones do not.
TEST(EnvDeathTest, BadLogLevelWarnsOnceAndMeansInfo) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(LogThreeLines("xyz"), ::testing::ExitedWithCode(0),
              "^[^\n]*XTIMER_LOG_LEVEL=xyz is not error, warn, info or debug; using the default info\n"
              "[^\n]*an info line\n[^\n]*another info line\n$");
  EXPECT_EXIT(LogThreeLines("warn"), ::testing::ExitedWithCode(0), "^$");  // warn hides info, says nothing
}

}  // namespace
}  // namespace xtimer::env
