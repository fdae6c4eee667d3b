// The result of merging many ranks' stack files: two prefix trees (Python, native) over one frame
// table, and per rank what the verdict needs (main-thread stacks, in-flight communication ops).
// Built by StackMerger; read by the verdict and the renderers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/kinds.h"
#include "common/stacks/rank_set.h"
#include "viewer/frame_table.h"
#include "viewer/stack_tree.h"

namespace xtimer {

// An in-flight operation on a communicator, as one rank reported it.
struct CommOp {
  std::string name;                   // ncclAllReduce, ...
  OpKind kind = OpKind::kCollective;  // kCollective, kP2p, or kCommInit (a rank in communicator set-up)
  std::string comm;
  std::string state;  // running, pending
  int64_t seq = -1;
  int64_t comm_size = -1;
  int64_t peer = -1;
  double in_flight_s = 0;
  int64_t bytes = -1;  // -1 when the stack file does not say
};

// GPU work in flight that is not a communication op: a kernel (or a stalled stream, CUPTI mode,
// named at the launch it waits at) with how long it has run or made no progress.
struct GpuWork {
  std::string name;
  std::string stream;
  double in_flight_s = 0;
};

struct RankSummary {
  int32_t rank = -1;
  std::string source;  // the file (or upload) it came from, for messages
  std::string host;
  int64_t pid = 0;
  std::string reason;
  std::string process_state;  // "S", "D", ...
  std::string trigger;
  std::vector<uint32_t> main_python;  // the main thread's frames, root first
  std::vector<uint32_t> main_native;
  std::vector<CommOp> comm_ops;
  std::vector<GpuWork> kernels;  // running kernels, at most kMaxKernels, longest first
  static constexpr size_t kMaxKernels = 8;
};

struct SkippedInput {
  std::string source;
  std::string reason;
};

struct MergedStacks {
  int32_t world_size = 0;
  FrameTable frames;
  StackTree python;
  StackTree native;
  std::vector<RankSummary> ranks;     // ascending by rank
  std::vector<SkippedInput> skipped;  // in the order they were met

  RankSet Reported() const;
  RankSet Missing() const { return Reported().Complement(world_size); }
};

}  // namespace xtimer
