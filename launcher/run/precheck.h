// xtimer_run --precheck 1|2: before this node joins the job, each of its GPUs runs a matmul and
// all of them one allreduce, the node checks of dlrover-run's levels (its level 1 also turns on
// --network-check, level 2 also --comm-perf-test: run_options.cc). A node that fails does not
// join; xtimer_run exits 1 saying what failed.
//
// The GPU work runs in a child process (xtimer_run --internal-precheck) that loads the CUDA
// runtime, cuBLAS and NCCL with dlopen and is killed at the deadline (XTIMER_GPU_CHECK_TIMEOUT),
// so a hung GPU cannot hang the agent. What the node lacks is not a failure: without a CUDA
// runtime there is nothing to check, without cuBLAS or NCCL that part is skipped (each said).
// A GPU that errors, is missing (no device) or does not finish in time fails the node.
//
// Call RunPrecheck before LD_PRELOAD is set for the workers: the child inherits the environment.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace xtimer::run {

struct PrecheckResult {
  bool passed = false;
  std::string why;                 // failed: what, one line
  std::vector<std::string> lines;  // what was measured or skipped, one line each
};

// Runs the check in a child process; `timeout_s` bounds the whole of it.
PrecheckResult RunPrecheck(double timeout_s);

// The child's side (xtimer_run --internal-precheck TIMEOUT_S): prints its answer as one line
// "XTRUN-PRECHECK <json>" on stdout. Returns the exit status.
int PrecheckWorkerMain(int argc, char** argv);

// The child's answer -> the result (pure; unit-tested):
//   {"ok": true, "gpus": [{"gpu", "tflops"}], "matmul_skipped"?: why, "allreduce"?: {"gpus",
//    "bytes", "seconds"}, "allreduce_skipped"?: why}   or
//   {"ok": false, "error": "...", "no_cuda"?: true}     (no_cuda: nothing to check, it passes)
PrecheckResult ReadPrecheckAnswer(const nlohmann::json& answer);

}  // namespace xtimer::run
