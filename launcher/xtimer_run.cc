// xtimer_run [torchrun options] SCRIPT [ARGS...]: torchrun's command line and worker
// environment on a C++ agent that is also the node's xtimer agent (launcher/README.md).
#include <cstdio>
#include <string>

#include "common/env.h"
#include "common/log.h"
#include "common/net/subprocess.h"
#include "launcher/agent/child_process.h"
#include "launcher/agent/node_agent.h"
#include "launcher/preload_env.h"
#include "launcher/run/comm_perf.h"
#include "launcher/run/elastic_agent.h"
#include "launcher/run/precheck.h"

int main(int argc, char** argv) {
  using namespace xtimer;
  // The GPU checks' own processes (launcher/run/precheck.h, comm_perf.h).
  if (argc >= 2 && std::string(argv[1]) == "--internal-precheck") return run::PrecheckWorkerMain(argc, argv);
  if (argc >= 2 && std::string(argv[1]) == "--internal-comm-perf") return run::CommPerfWorkerMain(argc, argv);
  run::RunOptions options;
  std::string error;
  bool help = false;
  if (!run::ParseRunOptions(argc, argv, &options, &error, &help)) {
    std::fprintf(stderr, "xtimer_run: %s\n", error.c_str());
    return 2;
  }
  if (help) {
    std::fputs(run::RunUsage().c_str(), stdout);
    return 0;
  }
  for (const std::string& w : options.warnings) Log(LogLevel::kWarn, "run: %s", w.c_str());
  for (const std::string& n : options.notes) Log(LogLevel::kInfo, "run: %s", n.c_str());
  // The environment's settings, read once; the workers get theirs through their own environment
  // (run::WorkerVariables), never through this process's.
  run::RunSettings settings = run::RunSettings::FromEnv(options);
  // --precheck: this node's GPUs before it joins (the check's own process runs untimed: the
  // preload goes to the workers only). A node that fails never joins the rendezvous.
  if (options.precheck >= 1) {
    run::PrecheckResult check = run::RunPrecheck(settings.gpu_check_timeout_s);
    for (const std::string& line : check.lines) Log(LogLevel::kInfo, "run: --precheck: %s", line.c_str());
    if (!check.passed) {
      std::fprintf(stderr, "xtimer_run: --precheck: this node failed its GPU check, so it does not join the job: %s\n",
                   check.why.c_str());
      return 1;
    }
    Log(LogLevel::kInfo, "run: --precheck: this node's GPUs passed");
  }
  // The workers' LD_PRELOAD and PYTHONPATH (a bad library: exit 2).
  if (!PreloadVariables(&settings.preload, &error)) {
    std::fprintf(stderr, "xtimer_run: %s\n", error.c_str());
    return 2;
  }

  // Warm interpreters for restarted Python workers: warm_worker.py in ../lib/xtimer-warm/ beside
  // this program (an install without it starts every worker fresh).
  if (std::string exe = net::SelfExe(); env::Bool("XTIMER_WARM_START") && !exe.empty()) {
    settings.warm_script = exe.substr(0, exe.rfind('/')) + "/../lib/xtimer-warm/warm_worker.py";
    settings.warm_imports = run::WarmPool::ImportsFromSettings();
  }

  // Before any thread exists, the etcd rendezvous' included: a thread that does not block the
  // stop signals would take a SIGTERM and end the process at once, workers and all.
  ChildProcess::BlockSignals();
  std::unique_ptr<run::Rendezvous> rdzv;
  if (options.elastic()) {
    rdzv = run::MakeEtcdRendezvous(options, &error);
    if (!rdzv) {
      std::fprintf(stderr, "xtimer_run: %s\n", error.c_str());
      return 1;
    }
  } else {
    rdzv = run::MakeStaticRendezvous(options);
  }

  std::unique_ptr<NodeAgent> agent;
  if (env::String("XTIMER_AGENT_SOCKET").empty()) {
    agent = std::make_unique<NodeAgent>(AgentConfig::FromEnv());
    if (!agent->Start(&error)) {
      Log(LogLevel::kWarn, "agent: %s; the workers run without a node agent", error.c_str());
      agent.reset();
    }
  }
  if (agent) settings.agent_socket = agent->SocketPath();
  if (options.evict_slow_nodes && options.elastic()) {
    if (agent) agent->WatchEvictions(EvictionThresholds{options.evict_slow_cost, options.evict_slow_after_s});
    else
      Log(LogLevel::kWarn,
          "run: --evict-slow-nodes: no node agent of its own here, so no verdicts: nothing is evicted");
  }
  int status = run::ElasticAgent(options, settings, std::move(rdzv), agent.get()).Run();
  if (agent) agent->Stop();
  return status;
}
