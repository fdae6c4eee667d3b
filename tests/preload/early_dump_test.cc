// The dump signal before the dumper was started (Dumper::InstallAtLoad, what the preload does at
// load): the handler starts the dumper thread itself, or, interrupted where that could deadlock,
// has a timer send the signal again and starts it then. One test per process (the state is
// process-wide); ctest runs each in its own.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "preload/capture/dumper.h"
#include "tests/capture/test_util.h"

namespace xtimer::capture {
namespace {

int CountThreads() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

// Waits in nanosleep (a blocking call the signal interrupts) until `n` dumps are done.
bool WaitForDumps(uint64_t n) {
  for (int i = 0; i < 2000; ++i) {
    if (Dumper::Instance().LastStats().dumps >= n) return true;
    usleep(10 * 1000);
  }
  return false;
}

TEST(EarlyDump, SignalBeforeStartRetriesOutOfLibcThenDumps) {
  testing::ScopedDir dir("early-dump");
  setenv("XTIMER_TIMELINE_PATH", dir.path().c_str(), 1);
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  ASSERT_EQ(Dumper::Instance().InstallAtLoad(true, "none"), SIGUSR2);

  const int threads = CountThreads();
  // kill(2) from this thread: the signal is handled as the call returns, inside libc and not
  // in a blocking call, where starting a thread could deadlock. No thread may start there.
  ASSERT_EQ(kill(getpid(), SIGUSR2), 0);
  EXPECT_EQ(CountThreads(), threads) << "a thread was started at an unsafe point";
  // The retry timer signals again while we wait in nanosleep: now the thread starts and dumps.
  ASSERT_TRUE(WaitForDumps(1)) << "no dump after the retry";
  DumpStats st = Dumper::Instance().LastStats();
  EXPECT_EQ(st.path, dir.path() + "/00001-00002.stacktrace");
  std::ifstream in(st.path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["reason"], "signal");
  EXPECT_EQ(j["rank"], 1);
  EXPECT_TRUE(j["inflight_ops"].empty());
  EXPECT_GE(st.captured, 1);

  // Started now: the next signal is an ordinary request to the running thread.
  ASSERT_EQ(kill(getpid(), SIGUSR2), 0);
  EXPECT_TRUE(WaitForDumps(2));
}

TEST(EarlyDump, ProgramHandlerKept) {
  if (Dumper::Instance().dump_signal() != 0) GTEST_SKIP() << "needs a process of its own (ctest runs it so)";
  struct sigaction sa {};
  sa.sa_handler = [](int) {};
  sigaction(SIGUSR2, &sa, nullptr);
  EXPECT_EQ(Dumper::Instance().InstallAtLoad(true, "none"), 0);
  struct sigaction now {};
  sigaction(SIGUSR2, nullptr, &now);
  EXPECT_EQ(now.sa_handler, sa.sa_handler) << "the program's handler was replaced";
}

}  // namespace
}  // namespace xtimer::capture
