// What the preloaded library knows about one operation that has not finished: the watchdog
// fills these, the stack file lists them (docs/formats.md, "inflight_ops").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/identity.h"
#include "common/kinds.h"

namespace xtimer {

struct InflightOp {
  std::string name;  // "ncclAllReduce", a kernel's symbol, "cublasGemmEx", "cudaStreamSynchronize"
  OpKind kind = OpKind::kKernel;
  uint64_t stream = 0;  // cudaStream_t as an integer (0 = legacy default stream)
  std::string comm;     // hex communicator id, empty if not NCCL
  int comm_rank = -1;
  int comm_size = -1;
  uint64_t seq = 0;      // per-communicator call number, from 1; 0 if not NCCL
  int peer = -1;         // p2p peer rank, else -1
  uint64_t bytes = 0;    // 0 if not known / not applicable
  bool running = false;  // started on its stream (start event complete)
  // Event-pair mode, a plain kernel timed by its end alone: `running` means the ops before it on
  // its stream completed; it may still wait for another stream (cudaStreamWaitEvent).
  bool start_derived = false;
  int blocked_by = -1;     // index in the list of the op it waits behind, or -1
  double in_flight_s = 0;  // since start (running) or since issue (pending)
  // CUPTI mode, a stream with unfinished work (stream_watch.h): `name` is the oldest launch on
  // it that has not finished (`head_of_stream`) or, when that is no longer known, the last one
  // launched; in_flight_s the time since the stream last made progress, since_launch_s since the
  // last launch (both as CUPTI's flushes see them, every 0.1 s).
  bool last_on_stream = false;
  bool head_of_stream = false;
  double since_launch_s = 0;
};

// Who this process is in the job.
struct RankInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = -1;
};

// Who the launcher's variables say this process is (common/identity.h); rank 0 of 1 for what
// they do not say.
inline RankInfo RankFromEnv() {
  const RankEnv env = ReadRankEnv();
  RankInfo r;
  if (env.rank >= 0) r.rank = env.rank;
  if (env.world_size > 0) r.world_size = env.world_size;
  r.local_rank = env.local_rank;
  return r;
}

using InflightOps = std::vector<InflightOp>;

}  // namespace xtimer
