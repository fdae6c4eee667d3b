// xtimer_run --comm-perf-test (also --precheck 2): before a round's workers start, the round's
// ranks run NCCL allreduces of growing sizes, and each node's local rank 0 prints their bandwidth
// as a table, with nccl-tests' figures: algbw = bytes / time, busbw = algbw x 2(n-1)/n (GB/s of
// 10^9 bytes). It runs in every round that counts no restart yet (the first, and rounds that
// only changed the node set before any failure); all nodes of a round agree on that.
//
// The ranks are processes like the workers: this executable with --internal-comm-perf and the
// round's torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), without
// the preload. Global rank 0 hands out NCCL's unique id on MASTER_ADDR:MASTER_PORT, the port
// the workers' own store takes next (both bind it with SO_REUSEADDR). Each waits at most
// XTIMER_GPU_CHECK_TIMEOUT; the agent kills what is left after that. A test that fails (no
// GPU, no NCCL, a node that never came) is said and training starts anyway.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launcher/run/round_rendezvous.h"
#include "launcher/run/run_options.h"
#include "launcher/run/worker_group.h"

namespace xtimer::run {

// The round's test processes of this node (one per local rank), their environment from `base`
// (xtimer_run's own) without the preload.
std::vector<WorkerSpec> CommPerfSpecs(const RunOptions& o, const Round& round, const std::vector<std::string>& base,
                                      double timeout_s);

// The child's side (xtimer_run --internal-comm-perf TIMEOUT_S). Returns the exit status.
int CommPerfWorkerMain(int argc, char** argv);

struct PerfRow {
  int64_t bytes = 0;
  double seconds = 0;  // per allreduce
};
// The table local rank 0 prints (pure; unit-tested).
std::string FormatPerfTable(int rank, int world, int nodes, const std::vector<PerfRow>& rows);

}  // namespace xtimer::run
