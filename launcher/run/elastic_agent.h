// xtimer_run's loop on one node: join a round, start the node's workers with torchrun's
// environment under the preload, watch them, and go to a new round when a worker fails, a rank
// hangs (after its stacks are merged), or the rendezvous says so (a node lost or waiting).
// After --max-restarts failures it ends with a torchrun-like summary. The node agent
// (node_agent.h: stacks, metrics, collector link, checkpoint saver) lives for the whole run,
// so its memory snapshots outlive the workers.
//
// Everything runs on the calling (main) thread; the forwarded signals and SIGCHLD must be
// blocked before any thread starts (ChildProcess::BlockSignals).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "launcher/run/round_rendezvous.h"
#include "launcher/run/run_options.h"
#include "launcher/run/worker_group.h"

namespace xtimer {
class NodeAgent;
}

namespace xtimer::run {

// Worker environment variables for one worker of a round (KEY=VALUE, on top of `base`).
std::vector<std::string> WorkerEnvironment(const RunOptions& o, const Round& round, int local_rank,
                                           const std::vector<std::string>& base);

class ElasticAgent {
 public:
  // `agent` may be null (no node agent could start).
  ElasticAgent(RunOptions options, std::unique_ptr<Rendezvous> rendezvous, NodeAgent* agent);
  ~ElasticAgent();
  // Runs until the job ends on this node; returns the exit status for xtimer_run (0 success,
  // 1 failure, 128+N when stopped by signal N).
  int Run();

 private:
  enum class Outcome { kSucceeded, kFailed, kHung, kNewRound, kSignal };
  Outcome Monitor(WorkerGroup& group, std::string* why, int* signal);
  // --comm-perf-test before the round's workers: 0 when it ended (well or not), else the stop
  // signal that came meanwhile.
  int CommPerfTest(const Round& round);
  std::vector<WorkerSpec> Specs(const Round& round) const;
  void PrintFailureSummary(const std::string& headline);
  void PersistCheckpoints();

  RunOptions o_;
  std::unique_ptr<Rendezvous> rdzv_;
  NodeAgent* agent_;
  std::vector<std::vector<int>> numa_cpus_;  // --numa-affinity: each local rank's CPUs
  std::string run_log_dir_;                  // LOG_DIR/<run id>_<random> ("" = none: --log-dir /dev/null)
  std::string temp_root_;                    // /tmp/torchelastic_<random> when no --log-dir was given
  bool keep_temp_root_ = false;
  Round round_;
  WorkerExit first_failure_;
  std::vector<WorkerExit> other_failures_;
  bool have_failure_ = false;
};

}  // namespace xtimer::run
