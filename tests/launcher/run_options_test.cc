// xtimer_run's command line (torchrun's flags, both spellings) and the worker environment.
#include <gtest/gtest.h>

#include <map>

#include "launcher/run/elastic_agent.h"
#include "launcher/run/run_options.h"

namespace xtimer::run {
namespace {

bool Parse(std::vector<std::string> args, RunOptions* o, std::string* error) {
  std::vector<char*> argv = {const_cast<char*>("xtimer_run")};
  for (std::string& a : args) argv.push_back(a.data());
  bool help = false;
  return ParseRunOptions(static_cast<int>(argv.size()), argv.data(), o, error, &help);
}

TEST(RunOptions, TorchrunSpellingsAndScriptArguments) {
  RunOptions o;
  std::string error;
  ASSERT_TRUE(Parse({"--nnodes=2:4", "--nproc_per_node", "8", "--max-restarts=3", "--rdzv_backend", "etcd",
                     "--rdzv-endpoint", "etcd:2379", "--rdzv_id=job1", "--rdzv-conf",
                     "join_timeout=60,last_call_timeout=5,lease_ttl=4", "train.py", "--lr", "0.1"},
                    &o, &error))
      << error;
  EXPECT_EQ(o.min_nodes, 2);
  EXPECT_EQ(o.max_nodes, 4);
  EXPECT_EQ(o.nproc_per_node, 8);
  EXPECT_EQ(o.max_restarts, 3);
  EXPECT_TRUE(o.elastic());
  EXPECT_EQ(o.rdzv_id, "job1");
  EXPECT_DOUBLE_EQ(o.join_timeout_s, 60);
  EXPECT_DOUBLE_EQ(o.last_call_timeout_s, 5);
  EXPECT_DOUBLE_EQ(o.lease_ttl_s, 4);
  EXPECT_EQ(o.script, (std::vector<std::string>{"train.py", "--lr", "0.1"}));
  EXPECT_EQ(WorkerCommand(o)[1], "-u");
  EXPECT_EQ(WorkerCommand(o).back(), "0.1");
}

TEST(RunOptions, ModuleAndNoPython) {
  RunOptions o;
  std::string error;
  ASSERT_TRUE(Parse({"--standalone", "-m", "pkg.train", "x"}, &o, &error)) << error;
  std::vector<std::string> cmd = WorkerCommand(o);
  EXPECT_EQ(std::vector<std::string>(cmd.begin() + 1, cmd.end()),
            (std::vector<std::string>{"-u", "-m", "pkg.train", "x"}));
  RunOptions p;
  ASSERT_TRUE(Parse({"--no_python", "/bin/echo", "hi"}, &p, &error)) << error;
  EXPECT_EQ(WorkerCommand(p), (std::vector<std::string>{"/bin/echo", "hi"}));
}

TEST(RunOptions, NetworkCheckWithEtcdOrOneNode) {
  RunOptions o;
  std::string error;
  ASSERT_TRUE(Parse({"--nnodes", "7:8", "--rdzv-backend", "etcd", "--rdzv-endpoint", "e:2379", "--rdzv-id", "j",
                     "--network-check", "--exclude-straggler", "t.py"},
                    &o, &error))
      << error;
  EXPECT_TRUE(o.network_check);
  EXPECT_TRUE(o.exclude_straggler);
  RunOptions one;
  ASSERT_TRUE(Parse({"--standalone", "--network-check", "t.py"}, &one, &error)) << error;  // a no-op, said once
  EXPECT_TRUE(one.network_check);
}

TEST(RunOptions, BadInputGetsOneLineNamingTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  } cases[] = {
      {{"--nnodes", "3:2", "t.py"}, "MIN is larger than MAX"},
      {{"--nnodes", "2:4", "t.py"}, "needs --rdzv-backend etcd"},
      {{"--rdzv-backend", "c10d", "t.py"}, "c10d is not supported"},
      {{"--rdzv-backend", "etcd", "--rdzv-id", "j", "t.py"}, "needs --rdzv-endpoint"},
      {{"--nproc-per-node", "x", "t.py"}, "--nproc-per-node takes a whole number"},
      {{"--max-restarts"}, "--max-restarts needs a value"},
      {{"--rdzv-conf", "bogus=1", "t.py"}, "unknown key 'bogus'"},
      {{"--frobnicate", "t.py"}, "unknown option --frobnicate"},
      {{"--nproc-per-node", "2"}, "no training script"},
      {{"--exclude-straggler", "t.py"}, "needs --network-check"},
      {{"--network-check", "--nnodes", "2", "--node-rank", "0", "t.py"}, "needs --rdzv-backend etcd"},
      {{"--node-rank", "2", "--nnodes", "2", "t.py"}, "is not below --nnodes 2"},
  };
  for (const Case& c : cases) {
    RunOptions o;
    std::string error;
    EXPECT_FALSE(Parse(c.args, &o, &error)) << c.says;
    EXPECT_NE(error.find(c.says), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

TEST(WorkerEnvironment, TorchrunVariables) {
  RunOptions o;
  o.nproc_per_node = 4;
  o.max_restarts = 3;
  o.rdzv_id = "job";
  Round r;
  r.group_rank = 2;
  r.group_world_size = 3;
  r.restarts = 1;
  r.master_addr = "10.0.0.1";
  r.master_port = 1234;
  std::vector<std::string> env = WorkerEnvironment(o, r, 1, {"PATH=/bin", "RANK=99"});
  std::map<std::string, std::string> m;
  for (const std::string& kv : env) m[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  EXPECT_EQ(m["RANK"], "9");
  EXPECT_EQ(m["LOCAL_RANK"], "1");
  EXPECT_EQ(m["WORLD_SIZE"], "12");
  EXPECT_EQ(m["LOCAL_WORLD_SIZE"], "4");
  EXPECT_EQ(m["GROUP_RANK"], "2");
  EXPECT_EQ(m["GROUP_WORLD_SIZE"], "3");
  EXPECT_EQ(m["ROLE_RANK"], "9");
  EXPECT_EQ(m["ROLE_WORLD_SIZE"], "12");
  EXPECT_EQ(m["ROLE_NAME"], "default");
  EXPECT_EQ(m["MASTER_ADDR"], "10.0.0.1");
  EXPECT_EQ(m["MASTER_PORT"], "1234");
  EXPECT_EQ(m["TORCHELASTIC_RESTART_COUNT"], "1");
  EXPECT_EQ(m["TORCHELASTIC_MAX_RESTARTS"], "3");
  EXPECT_EQ(m["TORCHELASTIC_RUN_ID"], "job");
  EXPECT_EQ(m["OMP_NUM_THREADS"], "1");
  EXPECT_EQ(m["PATH"], "/bin");
  EXPECT_EQ(std::count_if(env.begin(), env.end(), [](auto& kv) { return kv.rfind("RANK=", 0) == 0; }), 1);
  // As torchrun: 1 unless the launcher's own environment says otherwise, which is passed on once.
  EXPECT_EQ(m["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
  env = WorkerEnvironment(o, r, 1, {"TORCH_NCCL_ASYNC_ERROR_HANDLING=3"});
  EXPECT_EQ(std::count(env.begin(), env.end(), "TORCH_NCCL_ASYNC_ERROR_HANDLING=3"), 1);
  EXPECT_EQ(std::count_if(env.begin(), env.end(),
                          [](auto& kv) { return kv.rfind("TORCH_NCCL_ASYNC_ERROR_HANDLING=", 0) == 0; }),
            1);
}

}  // namespace
}  // namespace xtimer::run
