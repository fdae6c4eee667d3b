// xtimer_run's command line (torchrun's and dlrover-run's flags, both spellings, PET_*) and the
// worker environment.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <functional>
#include <map>

#include "launcher/run/elastic_agent.h"
#include "launcher/run/run_options.h"
#include "tests/launcher/fake_sysfs.h"

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

TEST(RunOptions, EvictSlowNodesAndItsThresholds) {
  RunOptions d;
  std::string error;
  ASSERT_TRUE(Parse({"t.py"}, &d, &error)) << error;
  EXPECT_FALSE(d.evict_slow_nodes);  // off by default
  EXPECT_DOUBLE_EQ(d.evict_slow_cost, 0.2);
  EXPECT_DOUBLE_EQ(d.evict_slow_after_s, 10);
  RunOptions o;
  ASSERT_TRUE(Parse({"--nnodes", "3:4", "--rdzv-backend", "etcd", "--rdzv-endpoint", "e:2379", "--rdzv-id", "j",
                     "--evict-slow-nodes", "--evict_slow_cost=0.3", "--evict-slow-after", "20", "t.py"},
                    &o, &error))
      << error;
  EXPECT_TRUE(o.evict_slow_nodes);
  EXPECT_DOUBLE_EQ(o.evict_slow_cost, 0.3);
  EXPECT_DOUBLE_EQ(o.evict_slow_after_s, 20);
  EXPECT_TRUE(o.warnings.empty());
  // One node: accepted, said once to do nothing; a threshold without the switch: said once.
  RunOptions one;
  ASSERT_TRUE(Parse({"--standalone", "--evict-slow-nodes", "t.py"}, &one, &error)) << error;
  ASSERT_EQ(one.warnings.size(), 1u);
  EXPECT_NE(one.warnings[0].find("--evict-slow-nodes: one node"), std::string::npos) << one.warnings[0];
  RunOptions off;
  ASSERT_TRUE(Parse({"--evict-slow-after", "5", "t.py"}, &off, &error)) << error;
  ASSERT_EQ(off.warnings.size(), 1u);
  EXPECT_NE(off.warnings[0].find("which is off"), std::string::npos) << off.warnings[0];
}

TEST(RunOptions, NodeUnitBothSpellings) {
  for (std::vector<std::string> flag :
       {std::vector<std::string>{"--node_unit", "2"}, {"--node_unit=2"}, {"--node-unit", "2"}, {"--node-unit=2"}}) {
    std::vector<std::string> args = {"--nnodes",        "2:5",    "--rdzv-backend", "etcd",
                                     "--rdzv-endpoint", "e:2379", "--rdzv-id",      "j"};
    args.insert(args.end(), flag.begin(), flag.end());
    args.push_back("t.py");
    RunOptions o;
    std::string error;
    ASSERT_TRUE(Parse(args, &o, &error)) << error;
    EXPECT_EQ(o.node_unit, 2);
    EXPECT_EQ(o.script, std::vector<std::string>{"t.py"});
  }
  RunOptions d;
  std::string error;
  ASSERT_TRUE(Parse({"t.py"}, &d, &error)) << error;
  EXPECT_EQ(d.node_unit, 1);
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
      {{"--precheck", "3", "t.py"}, "--precheck takes a whole number from 0 to 2, not '3'"},
      {{"--accelerator", "tpu", "t.py"}, "--accelerator takes nvidia.com/gpu, ascend-npu or mthreads.com/gpu"},
      {{"--start-method", "thread", "t.py"}, "--start-method takes spawn, fork or forkserver"},
      {{"--signals-to-handle", "SIGTERM,SIGKILL", "t.py"}, "'SIGKILL' is not a signal xtimer_run handles"},
      {{"--signals-to-handle", "", "t.py"}, "--signals-to-handle needs a comma-separated list"},
      {{"--box-pairs", "t.py"}, "--box-pairs needs one or more socket pairs"},
      {{"--network-check=1", "t.py"}, "--network-check is a switch and takes no value"},
      {{"--min-bandwidth", "-5", "t.py"}, "--min-bandwidth takes MB/s"},
      {{"--evict-slow-nodes", "--nnodes", "2", "--node-rank", "0", "t.py"},
       "--evict-slow-nodes with several nodes "
       "needs --rdzv-backend etcd"},
      {{"--evict-slow-cost", "0", "t.py"}, "--evict-slow-cost takes a share of the step time above 0 and at most 1"},
      {{"--evict-slow-cost", "20%", "t.py"}, "--evict-slow-cost takes a share"},
      {{"--evict-slow-after", "-1", "t.py"}, "--evict-slow-after takes seconds (a number > 0), not '-1'"},
      {{"--evict-slow-nodes=1", "t.py"}, "--evict-slow-nodes is a switch and takes no value"},
      {{"--training_port", "70000", "t.py"}, "--training-port takes a whole number from 1 to 65535"},
      {{"--local-ranks-filter", "0,x", "t.py"}, "--local-ranks-filter takes local ranks separated by commas"},
      {{"--save_at_breakpoint=2", "t.py"}, "--save-at-breakpoint takes 0 or 1"},
      {{"--node_unit", "0", "t.py"}, "--node-unit takes a whole number"},
      {{"--node-unit", "2", "--standalone", "t.py"}, "no multiple of 2 nodes lies between MIN and MAX"},
      // A path option followed by another option: once a folder named --no-python.
      {{"--log-dir", "--no-python", "/bin/true"}, "--log-dir needs a folder, not the option '--no-python'"},
      {{"--log_dir=--tee", "t.py"}, "--log-dir needs a folder, not the option '--tee'"},
      {{"--nnodes", "3:3", "--rdzv-backend", "etcd", "--rdzv-endpoint", "e:1", "--rdzv-id", "j", "--node-unit=2",
        "t.py"},
       "--node-unit 2 with --nnodes 3: no multiple"},
  };
  for (const Case& c : cases) {
    RunOptions o;
    std::string error;
    EXPECT_FALSE(Parse(c.args, &o, &error)) << c.says;
    EXPECT_NE(error.find(c.says), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

// Every flag of dlrover-run's usage (the seed's user guide: its own and torchrun's), in both
// spellings (--a-b, --a_b) and both forms (--a b, --a=b): accepted, never "unknown option", and
// doing what it says. --node_unit is the one flag of that usage this list leaves to its own test.
TEST(RunOptions, EveryDlroverRunFlagInBothSpellings) {
  struct Case {
    std::string flag;  // dashed; "" value: a switch
    std::string value;
    std::vector<std::string> with;                   // what else the flag needs
    std::function<bool(const RunOptions&)> applied;  // it did what it says
  } cases[] = {
      {"--nnodes",
       "2:4",
       {"--rdzv-backend", "etcd", "--rdzv-endpoint", "e:1", "--rdzv-id", "j"},
       [](auto& o) { return o.min_nodes == 2 && o.max_nodes == 4; }},
      {"--nproc-per-node", "3", {}, [](auto& o) { return o.nproc_per_node == 3; }},
      {"--rdzv-backend", "etcd", {"--rdzv-endpoint", "e:1", "--rdzv-id", "j"}, [](auto& o) { return o.elastic(); }},
      {"--rdzv-endpoint", "h:7", {}, [](auto& o) { return o.master_addr == "h" && o.master_port == 7; }},
      {"--rdzv-id", "job", {}, [](auto& o) { return o.rdzv_id == "job"; }},
      {"--rdzv-conf", "join_timeout=9", {}, [](auto& o) { return o.join_timeout_s == 9; }},
      {"--standalone", "", {}, [](auto& o) { return o.standalone; }},
      {"--max-restarts", "3", {}, [](auto& o) { return o.max_restarts == 3; }},
      {"--monitor-interval", "0.5", {}, [](auto& o) { return o.monitor_interval_s == 0.5; }},
      {"--start-method", "forkserver", {}, [](auto& o) { return o.warnings.empty(); }},
      {"--signals-to-handle", "SIGTERM,SIGUSR1", {}, [](auto& o) { return o.signals_to_handle == "SIGTERM,SIGUSR1"; }},
      {"--role", "trainer", {}, [](auto& o) { return o.role == "trainer"; }},
      {"--module", "", {}, [](auto& o) { return o.module; }},
      {"--no-python", "", {}, [](auto& o) { return o.no_python; }},
      {"--run-path", "", {}, [](auto& o) { return o.run_path; }},
      {"--log-dir", "/tmp/l", {}, [](auto& o) { return o.log_dir == "/tmp/l"; }},
      {"--redirects", "3", {}, [](auto& o) { return o.redirects == kBoth; }},
      {"--tee", "2", {}, [](auto& o) { return o.tee == kStderr; }},
      {"--local-ranks-filter",
       "0,2",
       {},
       [](auto& o) {
         return o.local_ranks_filter == std::vector<int>{0, 2};
       }},
      {"--node-rank", "1", {"--nnodes", "2"}, [](auto& o) { return o.node_rank == 1; }},
      {"--master-addr", "10.0.0.1", {}, [](auto& o) { return o.master_addr == "10.0.0.1"; }},
      {"--master-port", "1234", {}, [](auto& o) { return o.master_port == 1234; }},
      {"--local-addr", "10.0.0.2", {}, [](auto& o) { return o.local_addr == "10.0.0.2"; }},
      {"--logs-specs", "mine", {}, [](auto& o) { return o.warnings.size() == 1; }},
      {"--precheck", "1", {}, [](auto& o) { return o.precheck == 1; }},
      {"--auto-config", "", {}, [](auto& o) { return o.auto_config; }},
      {"--auto-tunning", "", {}, [](auto& o) { return o.warnings.size() == 1; }},
      {"--exclude-straggler", "", {"--network-check"}, [](auto& o) { return o.exclude_straggler; }},
      {"--save-at-breakpoint", "", {}, [](auto& o) { return o.save_at_breakpoint; }},
      {"--accelerator", "nvidia.com/gpu", {}, [](auto& o) { return o.warnings.empty(); }},
      {"--training-port", "60000", {}, [](auto& o) { return o.warnings.size() == 1; }},
      {"--switchbox-check", "", {}, [](auto& o) { return o.warnings.size() == 1; }},
      {"--box-pairs", "0:1", {}, [](auto& o) { return o.warnings.size() == 1; }},
      {"--min-bandwidth", "10000", {"--network-check"}, [](auto& o) { return o.min_bandwidth_mbps == 10000; }},
      {"--min-channels", "2", {}, [](auto& o) { return o.warnings.size() == 1; }},
      {"--numa-affinity", "", {}, [](auto& o) { return o.numa_affinity; }},
      {"--network-check", "", {}, [](auto& o) { return o.network_check; }},
      {"--comm-perf-test", "", {}, [](auto& o) { return o.comm_perf_test; }},
      {"--ucp-device-type", "cpu", {}, [](auto& o) { return o.warnings.size() == 1; }},
      {"--stop-grace", "2", {}, [](auto& o) { return o.stop_grace_s == 2; }},
  };
  for (const Case& c : cases) {
    std::string underscored = c.flag;
    for (size_t i = 2; i < underscored.size(); ++i)
      if (underscored[i] == '-') underscored[i] = '_';
    std::vector<std::vector<std::string>> forms;
    for (const std::string& name : {c.flag, underscored}) {
      if (c.value.empty()) {
        forms.push_back({name});
      } else {
        forms.push_back({name, c.value});
        forms.push_back({name + "=" + c.value});
      }
    }
    for (std::vector<std::string> args : forms) {
      std::string shown;
      for (const std::string& a : args) shown += a + " ";
      args.insert(args.end(), c.with.begin(), c.with.end());
      args.insert(args.end(), {"train.py", "--lr", "1"});
      RunOptions o;
      std::string error;
      ASSERT_TRUE(Parse(args, &o, &error)) << shown << ": " << error;
      EXPECT_TRUE(c.applied(o)) << shown;
      EXPECT_EQ(o.script, (std::vector<std::string>{"train.py", "--lr", "1"})) << shown;
    }
  }
  // The short forms of torchrun.
  RunOptions o;
  std::string error;
  ASSERT_TRUE(Parse({"-m", "-r", "1", "-t3", "pkg.train"}, &o, &error)) << error;
  EXPECT_TRUE(o.module);
  EXPECT_EQ(o.redirects, kStdout);
  EXPECT_EQ(o.tee, kBoth);
}

// dlrover-run's flags that cannot mean anything here: accepted, one warning line each (once,
// however often given), naming the flag and why; the script and its arguments untouched.
TEST(RunOptions, FlagsWithoutMeaningHereWarnOnce) {
  RunOptions o;
  std::string error;
  ASSERT_TRUE(Parse({"--switchbox-check",
                     "--switchbox_check",
                     "--box-pairs",
                     "0:1",
                     "2:4",
                     "3:5",
                     "6:7",
                     "--min-channels=2",
                     "--auto_tunning",
                     "--training_port",
                     "60000",
                     "--ucp_device_type",
                     "cpu",
                     "--logs-specs",
                     "x",
                     "--accelerator",
                     "ascend-npu",
                     "--min-bandwidth",
                     "10000",
                     "train.py",
                     "0:1"},
                    &o, &error))
      << error;
  EXPECT_EQ(o.script, (std::vector<std::string>{"train.py", "0:1"}));  // --box-pairs stops at the script
  std::vector<std::string> flags = {"--switchbox-check", "--box-pairs",     "--min-channels",
                                    "--auto-tunning",    "--training-port", "--ucp-device-type",
                                    "--logs-specs",      "--accelerator",   "--min-bandwidth"};
  ASSERT_EQ(o.warnings.size(), flags.size());
  for (size_t i = 0; i < flags.size(); ++i) {
    EXPECT_EQ(o.warnings[i].rfind(flags[i] + ": ", 0), 0u) << o.warnings[i];
    EXPECT_EQ(o.warnings[i].find('\n'), std::string::npos);
  }
  EXPECT_NE(o.warnings[0].find("switchbox"), std::string::npos);
  EXPECT_NE(o.warnings.back().find("network check is off"), std::string::npos) << o.warnings.back();
}

// torchrun's --run-path is a switch: the flag after it is a flag, and the script runs with Python
// (over --no-python and -m, as in torchrun).
TEST(RunOptions, RunPathIsASwitch) {
  RunOptions o;
  std::string error;
  ASSERT_TRUE(Parse({"--run-path", "--nproc-per-node", "1", "train.py", "x"}, &o, &error)) << error;
  EXPECT_EQ(o.nproc_per_node, 1);
  EXPECT_EQ(o.script, (std::vector<std::string>{"train.py", "x"}));
  std::vector<std::string> cmd = WorkerCommand(o);
  EXPECT_EQ(std::vector<std::string>(cmd.begin() + 1, cmd.end()), (std::vector<std::string>{"-u", "train.py", "x"}));
  RunOptions p;
  ASSERT_TRUE(Parse({"--run_path", "--no-python", "-m", "/abs/train.py"}, &p, &error)) << error;
  cmd = WorkerCommand(p);
  EXPECT_EQ(std::vector<std::string>(cmd.begin() + 1, cmd.end()), (std::vector<std::string>{"-u", "/abs/train.py"}));
}

// Sets environment variables for one scope.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (auto [k, v] : vars) {
      names_.push_back(k);
      setenv(k, v, 1);
    }
  }
  ~ScopedEnv() {
    for (const char* k : names_) unsetenv(k);
  }

 private:
  std::vector<const char*> names_;
};

// As under torchrun and dlrover-run, PET_<FLAG> gives a flag its value when the command line
// does not: a manifest's environment carries the rendezvous, the command line stays as it was.
TEST(RunOptions, PetEnvironmentUnderTheCommandLine) {
  ScopedEnv env({{"PET_NPROC_PER_NODE", "3"},
                 {"PET_MAX_RESTARTS", "9"},
                 {"PET_NETWORK_CHECK", "1"},
                 {"PET_RDZV_BACKEND", "etcd"},
                 {"PET_RDZV_ENDPOINT", "etcd:2379"},
                 {"PET_RDZV_ID", "job1"},
                 {"PET_SWITCHBOX_CHECK", "0"}});
  RunOptions o;
  std::string error;
  ASSERT_TRUE(Parse({"--nnodes", "1:4", "--max_restarts=3", "train.py"}, &o, &error)) << error;
  EXPECT_EQ(o.nproc_per_node, 3);
  EXPECT_EQ(o.max_restarts, 3);  // the command line wins
  EXPECT_TRUE(o.network_check);
  EXPECT_TRUE(o.elastic());
  EXPECT_EQ(o.rdzv_endpoint, "etcd:2379");
  EXPECT_EQ(o.rdzv_id, "job1");
  EXPECT_TRUE(o.warnings.empty());  // PET_SWITCHBOX_CHECK=0: off, nothing to say
  {
    ScopedEnv bad({{"PET_NNODES", "many"}});
    RunOptions p;
    EXPECT_FALSE(Parse({"train.py"}, &p, &error));
    EXPECT_EQ(error.rfind("PET_NNODES: --nnodes takes N or MIN:MAX", 0), 0u) << error;
  }
  {
    ScopedEnv bad({{"PET_STANDALONE", "yes"}});
    RunOptions p;
    EXPECT_FALSE(Parse({"train.py"}, &p, &error));
    EXPECT_NE(error.find("PET_STANDALONE=yes: takes 1 or 0"), std::string::npos) << error;
  }
}

// A path option takes the next argument as its path: when that is another option the command
// line is wrong (`--log-dir --no-python /bin/true` once made a folder named --no-python and
// ran /bin/true with Python). A folder of such a name is still reachable as ./--name.
TEST(RunOptions, APathOptionRefusesAnOptionAsItsPath) {
  RunOptions o;
  std::string error;
  EXPECT_FALSE(Parse({"--log-dir", "--no-python", "/bin/true"}, &o, &error));
  EXPECT_EQ(error,
            "--log-dir needs a folder, not the option '--no-python' (a folder whose name starts with -- is "
            "written ./--no-python)");
  EXPECT_EQ(o.log_dir, "");
  {
    ScopedEnv env({{"PET_LOG_DIR", "--standalone"}});
    RunOptions p;
    EXPECT_FALSE(Parse({"t.py"}, &p, &error));
    EXPECT_NE(error.find("--log-dir needs a folder, not the option '--standalone'"), std::string::npos) << error;
  }
  RunOptions ok;
  ASSERT_TRUE(Parse({"--log-dir", "./--odd", "--no-python", "/bin/true"}, &ok, &error)) << error;
  EXPECT_EQ(ok.log_dir, "./--odd");
  EXPECT_TRUE(ok.no_python);
  RunOptions dash;
  ASSERT_TRUE(Parse({"--log-dir=-d", "t.py"}, &dash, &error)) << error;  // one dash: a name like any other
  EXPECT_EQ(dash.log_dir, "-d");
}

// dlrover-run's levels: 1 = this node's GPUs + the network check (where the store lets the
// nodes agree on it), 2 = also the collective's bandwidth.
TEST(RunOptions, PrecheckLevels) {
  std::string error;
  RunOptions one;
  ASSERT_TRUE(Parse({"--precheck", "1", "--standalone", "t.py"}, &one, &error)) << error;
  EXPECT_EQ(one.precheck, 1);
  EXPECT_FALSE(one.network_check);
  EXPECT_FALSE(one.comm_perf_test);
  RunOptions etcd;
  ASSERT_TRUE(Parse({"--precheck=2", "--nnodes", "2:3", "--rdzv-backend", "etcd", "--rdzv-endpoint", "e:1", "--rdzv-id",
                     "j", "--exclude-straggler", "t.py"},
                    &etcd, &error))
      << error;
  EXPECT_TRUE(etcd.network_check);
  EXPECT_TRUE(etcd.comm_perf_test);
  RunOptions fixed;
  ASSERT_TRUE(Parse({"--precheck", "1", "--nnodes", "2", "--node-rank", "1", "t.py"}, &fixed, &error)) << error;
  EXPECT_FALSE(fixed.network_check);  // not refused: the GPUs are checked, the network is not
  ASSERT_EQ(fixed.notes.size(), 1u);
  EXPECT_NE(fixed.notes[0].find("needs --rdzv-backend etcd"), std::string::npos) << fixed.notes[0];
}

// dlrover-run's --auto-config: nodes from NODE_NUM, a worker per GPU (sysfs, CUDA_VISIBLE_DEVICES),
// the network check from 4 nodes on. What the command line says wins.
TEST(RunOptions, AutoConfigFromTheMachineAndTheEnvironment) {
  testing::FakeSysfs fs;
  fs.Gpu("0000:1b:00.0", 0);
  fs.Gpu("0000:3d:00.0", 0);
  fs.Gpu("0000:b1:00.0", 1);
  ScopedEnv env({{"XTIMER_SYSFS_ROOT", fs.root().c_str()}, {"NODE_NUM", "4"}});
  unsetenv("CUDA_VISIBLE_DEVICES");
  std::string error;
  RunOptions o;
  ASSERT_TRUE(Parse({"--auto-config", "--rdzv-backend", "etcd", "--rdzv-endpoint", "e:1", "--rdzv-id", "j", "t.py"}, &o,
                    &error))
      << error;
  EXPECT_EQ(o.min_nodes, 4);
  EXPECT_EQ(o.max_nodes, 4);
  EXPECT_EQ(o.nproc_per_node, 3);
  EXPECT_TRUE(o.network_check);
  ASSERT_EQ(o.notes.size(), 2u);
  EXPECT_EQ(o.notes[0], "--auto-config: 4 node(s) from NODE_NUM, 3 worker(s) per node, one per GPU");
  RunOptions gpu;  // torchrun's --nproc-per-node gpu counts the same GPUs
  ASSERT_TRUE(Parse({"--nproc-per-node", "gpu", "t.py"}, &gpu, &error)) << error;
  EXPECT_EQ(gpu.nproc_per_node, 3);

  RunOptions given;
  ScopedEnv visible({{"CUDA_VISIBLE_DEVICES", "2"}});
  ASSERT_TRUE(Parse({"--auto_config", "--nnodes", "2", "--node-rank", "0", "t.py"}, &given, &error)) << error;
  EXPECT_EQ(given.max_nodes, 2);       // --nnodes wins over NODE_NUM
  EXPECT_EQ(given.nproc_per_node, 1);  // one visible GPU
  EXPECT_FALSE(given.network_check);   // static nodes

  ScopedEnv bad({{"NODE_NUM", "0"}});
  RunOptions p;
  EXPECT_FALSE(Parse({"--auto-config", "t.py"}, &p, &error));
  EXPECT_NE(error.find("NODE_NUM (read by --auto-config) takes a whole number"), std::string::npos) << error;
}

TEST(RunOptions, HelpListsTheDlroverRunGroup) {
  std::string usage = RunUsage();
  size_t group = usage.find("dlrover-run options:");
  ASSERT_NE(group, std::string::npos);
  for (const char* flag :
       {"--precheck", "--comm-perf-test", "--numa-affinity", "--auto-config", "--min-bandwidth", "--switchbox-check",
        "--box-pairs", "--min-channels", "--auto-tunning", "--training-port", "--ucp-device-type", "--accelerator"})
    EXPECT_NE(usage.find(flag, group), std::string::npos) << flag;
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
  EXPECT_EQ(m["TORCHELASTIC_SIGNALS_TO_HANDLE"], "SIGTERM,SIGINT,SIGHUP,SIGQUIT");  // torchrun 2.9+'s default
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

// The flag table: every flag is in the usage made from it, takes both spellings, and a name that
// is not in it is refused with one line.
TEST(RunOptionsTable, EveryFlagIsInTheUsageAndTakesBothSpellings) {
  const std::string usage = RunUsage();
  std::vector<std::string> names = RunFlagNames();
  ASSERT_GE(names.size(), 40u);
  for (const std::string& name : names) {
    EXPECT_NE(usage.find(name), std::string::npos) << name;
    std::string underscored = name.substr(0, 2) + name.substr(2);
    std::replace(underscored.begin() + 2, underscored.end(), '-', '_');
    RunOptions o;
    std::string error;
    Parse({underscored}, &o, &error);  // no script: fails, but never as an unknown option
    EXPECT_EQ(error.find("unknown option"), std::string::npos) << underscored << ": " << error;
  }
  // The short aliases beside their flags, an optional value, the pairs, the ignored group.
  for (const char* line : {"  -m, --module ", "  -r, --redirects N ", "  -t, --tee N ", "  --save-at-breakpoint[=0|1] ",
                           "  --nnodes N|MIN:MAX ", "--box-pairs P [P ...]", "  --stop-grace S "})
    EXPECT_NE(usage.find(line), std::string::npos) << line;
}

TEST(RunOptionsTable, UnknownFlagsAndMissingValues) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  } cases[] = {
      {{"--bogus", "t.py"}, "unknown option --bogus (xtimer_run --help lists them"},
      {{"--bogus=1", "t.py"}, "unknown option --bogus=1"},
      {{"-x", "t.py"}, "unknown option -x"},
      {{"-mfoo", "t.py"}, "unknown option -mfoo"},  // -m takes no value, so none glued to it
      {{"--nproc"}, "unknown option --nproc"},      // no prefix matching
      {{"--rdzv-id"}, "--rdzv-id needs a value"},
      {{"--stop_grace"}, "--stop-grace needs a value"},
      {{"-r"}, "--redirects needs a value"},  // the alias is named by its flag
      {{"--log-dir"}, "--log-dir needs a value"},
      {{"--stop-grace=", "t.py"}, "--stop-grace takes seconds (a number >= 0), not ''"},
      {{"--module=1", "t.py"}, "--module is a switch and takes no value ('--module=1')"},
  };
  for (const Case& c : cases) {
    RunOptions o;
    std::string error;
    EXPECT_FALSE(Parse(c.args, &o, &error)) << c.says;
    EXPECT_NE(error.find(c.says), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

TEST(RunOptionsTable, ValueForms) {
  RunOptions o;
  std::string error;
  ASSERT_TRUE(Parse({"--stop-grace=2.5", "--nproc_per_node=4", "--rdzv-conf=join_timeout=7,lease_ttl=3", "-r3", "-t",
                     "2", "--save-at-breakpoint", "--role=trainer", "--", "--not-a-flag", "x"},
                    &o, &error))
      << error;
  EXPECT_EQ(o.stop_grace_s, 2.5);
  EXPECT_EQ(o.nproc_per_node, 4);
  EXPECT_EQ(o.join_timeout_s, 7);
  EXPECT_EQ(o.lease_ttl_s, 3);
  EXPECT_EQ(o.redirects, kBoth);
  EXPECT_EQ(o.tee, kStderr);
  EXPECT_TRUE(o.save_at_breakpoint);
  EXPECT_EQ(o.role, "trainer");
  EXPECT_EQ(o.script, (std::vector<std::string>{"--not-a-flag", "x"}));  // after --: the script
  RunOptions p;
  ASSERT_TRUE(Parse({"--save-at-breakpoint=0", "-m", "pkg.train"}, &p, &error)) << error;
  EXPECT_FALSE(p.save_at_breakpoint);
  EXPECT_TRUE(p.module);
}

// What xtimer_run takes from the environment is read once into RunSettings and passed on as
// values: the process's own environment is left as it was, and the workers get only what they
// read, through their own environment.
TEST(RunSettings, ReadOnceAndPassedToTheWorkersOnly) {
  unsetenv("XTIMER_HANG_ACTION");
  unsetenv("XTIMER_CKPT_PERSIST_ON_FAILURE");
  RunOptions o;
  RunSettings s = RunSettings::FromEnv(o);
  EXPECT_EQ(s.hang_action, "restart");  // xtimer_run's default
  EXPECT_TRUE(s.persist_on_failure.empty());
  EXPECT_GT(s.dump_wait_s, 0);
  EXPECT_GT(s.gpu_check_timeout_s, 0);
  EXPECT_EQ(std::getenv("XTIMER_HANG_ACTION"), nullptr);  // nothing written back
  EXPECT_EQ(WorkerVariables(s), (std::vector<std::string>{"XTIMER_HANG_ACTION=restart"}));

  o.save_at_breakpoint = false;  // --save-at-breakpoint 0
  s = RunSettings::FromEnv(o);
  EXPECT_EQ(s.persist_on_failure, "0");
  EXPECT_EQ(std::getenv("XTIMER_CKPT_PERSIST_ON_FAILURE"), nullptr);
  std::vector<std::string> env =
      WithVariables({"PATH=/bin", "XTIMER_HANG_ACTION=dump", "XTIMER_HANG_ACTION_X=1"}, WorkerVariables(s));
  EXPECT_EQ(env, (std::vector<std::string>{"PATH=/bin", "XTIMER_HANG_ACTION=restart", "XTIMER_HANG_ACTION_X=1",
                                           "XTIMER_CKPT_PERSIST_ON_FAILURE=0"}));
  {
    // The user's values win: an explicit hang action (even the preload's own default), an
    // explicit persist-on-failure, a dump wait.
    ScopedEnv user(
        {{"XTIMER_HANG_ACTION", "dump"}, {"XTIMER_CKPT_PERSIST_ON_FAILURE", "1"}, {"XTIMER_DUMP_WAIT", "7"}});
    s = RunSettings::FromEnv(o);
    EXPECT_EQ(s.hang_action, "dump");
    EXPECT_TRUE(s.persist_on_failure.empty());
    EXPECT_EQ(s.dump_wait_s, 7);
    EXPECT_EQ(WorkerVariables(s), (std::vector<std::string>{"XTIMER_HANG_ACTION=dump"}));
  }
}

}  // namespace
}  // namespace xtimer::run
