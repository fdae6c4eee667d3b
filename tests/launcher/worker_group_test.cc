// xtimer_run's worker group (launcher/run/worker_group.h): each worker in a session of its own,
// as torchrun starts its workers, and stopping a group reaches what its workers started.
#include "launcher/run/worker_group.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace xtimer::run {
namespace {

extern "C" char** environ;

std::vector<std::string> OurEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

WorkerSpec Shell(const std::string& script) {
  WorkerSpec s;
  s.argv = {"/bin/sh", "-c", script};
  s.env = OurEnvironment();
  s.console = false;
  return s;
}

// The reaper is the group's caller: block SIGCHLD as xtimer_run does.
class WorkerGroupTest : public testing::Test {
 protected:
  void SetUp() override {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  }
};

// With the kernel's autogroup scheduling each session gets its own share of the CPUs: workers
// in the agent's session got half of what torchrun's got on a busy machine.
TEST_F(WorkerGroupTest, EachWorkerLeadsASessionOfItsOwn) {
  WorkerGroup g;
  std::string error;
  // The worker reports its own session once it runs the command, after the fork's setup.
  std::string out = testing::TempDir() + "/xtimer-worker-sid-" + std::to_string(getpid());
  ASSERT_TRUE(
      g.Start({Shell("cut -d' ' -f6 /proc/$$/stat > " + out + ".tmp && mv " + out + ".tmp " + out + "; sleep 30"),
               Shell("sleep 30")},
              &error))
      << error;
  std::vector<pid_t> pids = g.pids();
  ASSERT_EQ(pids.size(), 2u);
  std::string sid;
  for (int i = 0; i < 1000 && sid.empty(); ++i) {
    std::ifstream f(out);
    if (!(f >> sid)) usleep(10 * 1000);
  }
  ASSERT_FALSE(sid.empty()) << "the worker never wrote its session";
  EXPECT_EQ(std::stol(sid), static_cast<long>(pids[0]));
  EXPECT_NE(getsid(pids[0]), getsid(0));
  g.Stop(5);
  std::remove(out.c_str());
}

TEST_F(WorkerGroupTest, StopReachesWhatAWorkerStarted) {
  WorkerGroup g;
  std::string error;
  std::string out = testing::TempDir() + "/xtimer-worker-child-" + std::to_string(getpid());
  ASSERT_TRUE(g.Start({Shell("sleep 30 & echo $! > " + out + ".tmp && mv " + out + ".tmp " + out + "; wait")}, &error))
      << error;
  pid_t child = 0;
  for (int i = 0; i < 1000 && child == 0; ++i) {
    std::ifstream f(out);
    if (!(f >> child)) child = 0, usleep(10 * 1000);
  }
  ASSERT_GT(child, 0);
  g.Stop(5);
  // The grandchild was in the worker's process group: gone (reaped by init or by us).
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    gone = kill(child, 0) != 0 && errno == ESRCH;
    if (!gone) {
      ReapStrays();
      usleep(10 * 1000);
    }
  }
  EXPECT_TRUE(gone);
  std::remove(out.c_str());
}

// Stopped at once, before a worker had the time to make its session: still stopped.
TEST_F(WorkerGroupTest, StopRightAfterStart) {
  for (int round = 0; round < 20; ++round) {
    WorkerGroup g;
    std::string error;
    ASSERT_TRUE(g.Start({Shell("sleep 30"), Shell("sleep 30")}, &error)) << error;
    // Returns once both are reaped: a SIGTERM that missed a worker would leave it to the SIGKILL
    // 600 s later, past the test's timeout.
    g.Stop(600);
    EXPECT_TRUE(g.empty());
  }
}

}  // namespace
}  // namespace xtimer::run
