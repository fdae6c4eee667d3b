// xtimer_run's warm interpreters (launcher/run/warm_pool.h) through WorkerGroup::Start: a worker
// handed to a warm Python runs with the round's environment and its own session, and every rule
// that sends a worker to a fresh process instead says why. Python is XTIMER_TEST_PYTHON; the warm
// interpreters import nothing, so each test takes a fraction of a second.
#include "launcher/run/warm_pool.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "launcher/run/worker_group.h"

namespace xtimer::run {
namespace {

class WarmPoolTest : public testing::Test {
 protected:
  void SetUp() override {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    dir_ = testing::TempDir() + "/xtimer-warm-" + std::to_string(getpid());
    std::string cmd = "mkdir -p " + dir_;
    ASSERT_EQ(system(cmd.c_str()), 0);
    // The worker writes its rank, its working folder, whether it leads a session and a variable
    // of the base environment.
    std::ofstream(dir_ + "/worker.py")
        << "import os, sys\n"
           "open(sys.argv[1], 'w').write(' '.join([os.environ['RANK'], os.getcwd(),\n"
           "    str(os.getsid(0) == os.getpid()), os.environ.get('FOO', '-'),\n"
           "    os.environ.get('XTIMER_RANK_PID', '-') == str(os.getpid()) and 'marked' or '-']))\n";
  }

  WorkerSpec Spec(int rank, const std::string& foo) {
    WorkerSpec s;
    s.argv = {XTIMER_TEST_PYTHON, "-u", dir_ + "/worker.py", dir_ + "/out-" + std::to_string(rank)};
    s.env = {"PATH=/usr/bin:/bin", "FOO=" + foo, "RANK=" + std::to_string(rank), "MASTER_PORT=" + std::to_string(rank)};
    s.local_rank = rank;
    s.rank = rank;
    s.console = false;
    return s;
  }

  // Runs the group to its end; the worker's output file ("" if none).
  std::string RunToEnd(WorkerGroup& g, int rank) {
    for (int i = 0; i < 1000 && g.Poll() == WorkerGroup::State::kRunning; ++i) usleep(10 * 1000);
    EXPECT_EQ(g.Poll(), WorkerGroup::State::kSucceeded);
    std::ifstream in(dir_ + "/out-" + std::to_string(rank));
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  std::string dir_;
  WarmPool pool_{XTIMER_TEST_PYTHON, XTIMER_WARM_WORKER, {}};
};

TEST_F(WarmPoolTest, AWorkerHandedOverRunsWithTheRoundsIdentity) {
  pool_.Fill({Spec(0, "bar")});  // rank 0 of some round: the pool keeps the base environment only
  WorkerSpec spec = Spec(0, "bar");
  spec.env[2] = "RANK=5";  // the next round gives this local rank another rank and port
  spec.env[3] = "MASTER_PORT=99";
  spec.rank = 5;
  std::string why;
  WorkerGroup g;
  std::string error;
  ASSERT_TRUE(g.Start({spec}, &error, &pool_)) << error;
  // "5 <our cwd> True bar marked": the round's rank, xtimer_run's folder, a session of its own,
  // the base environment, and the marker for the processes it starts.
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof cwd), nullptr);
  EXPECT_EQ(RunToEnd(g, 0), std::string("5 ") + cwd + " True bar marked");
  // Used once: the slot is empty until filled again.
  EXPECT_EQ(pool_.HandOver(spec, 1, 2, &why), -1);
  EXPECT_EQ(why, "no warm interpreter");
}

TEST_F(WarmPoolTest, AnotherBaseEnvironmentStartsFresh) {
  pool_.Fill({Spec(0, "bar")});
  std::string why;
  EXPECT_EQ(pool_.HandOver(Spec(0, "baz"), 1, 2, &why), -1);
  EXPECT_EQ(why, "its warm interpreter started with another FOO");
  // And a fresh process runs it, as WorkerGroup does.
  WorkerGroup g;
  std::string error;
  ASSERT_TRUE(g.Start({Spec(0, "baz")}, &error, &pool_)) << error;
  EXPECT_NE(RunToEnd(g, 0).find(" baz -"), std::string::npos);  // no marker: a fresh process
  EXPECT_EQ(pool_.HandOver(Spec(0, "baz"), 1, 2, &why), -1);
  EXPECT_EQ(why, "no warm interpreter");  // the one for "bar" was ended
}

TEST_F(WarmPoolTest, OnlyPythonWorkersWithoutCpuBindingAreHandedOver) {
  pool_.Fill({Spec(0, "bar")});
  std::string why;
  WorkerSpec shell = Spec(0, "bar");
  shell.argv = {"/bin/sh", "-c", "true"};
  EXPECT_EQ(pool_.HandOver(shell, 1, 2, &why), -1);
  EXPECT_EQ(why, "not a Python worker");
  WorkerSpec bound = Spec(0, "bar");
  bound.cpus = {0};
  EXPECT_EQ(pool_.HandOver(bound, 1, 2, &why), -1);
  EXPECT_EQ(why, "bound to CPUs (--numa-affinity)");
  EXPECT_EQ(pool_.HandOver(Spec(1, "bar"), 1, 2, &why), -1);  // local rank 1 has none
  EXPECT_EQ(why, "no warm interpreter");
}

TEST_F(WarmPoolTest, ADeadWarmInterpreterIsNotUsed) {
  pool_.Fill({Spec(0, "bar")});
  std::string kill = "pkill -KILL -P " + std::to_string(getpid()) + " -f 'warm_worke[r].py'";  // not the shell
  ASSERT_EQ(system(kill.c_str()), 0);
  while (waitpid(-1, nullptr, 0) > 0) {
  }
  std::string why;
  EXPECT_EQ(pool_.HandOver(Spec(0, "bar"), 1, 2, &why), -1);
  EXPECT_EQ(why, "no warm interpreter (it ended)");
}

TEST(RoundVariable, TheRoundsIdentityOnly) {
  for (const char* k : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
                        "TORCHELASTIC_ERROR_FILE", "XTIMER_AGENT_SOCKET", "GROUP_RANK", "ROLE_WORLD_SIZE"})
    EXPECT_TRUE(RoundVariable(k)) << k;
  for (const char* k : {"PYTHONPATH", "LD_PRELOAD", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "XTIMER_HANG_ACTION",
                        "TORCH_NCCL_ASYNC_ERROR_HANDLING", "RANKS"})
    EXPECT_FALSE(RoundVariable(k)) << k;
}

}  // namespace
}  // namespace xtimer::run
