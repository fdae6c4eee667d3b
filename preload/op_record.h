// One timed operation as it travels from the launch path to the poller (plain data, copied
// into a lock-free queue).
#pragma once

#include <cstdint>

#include "preload/event_pool.h"

namespace xtimer {

struct OpRecord {
  uint32_t class_id = 0;
  PairId pair = kNoPair;
  uint64_t stream = 0;      // the cudaStream_t the op was issued on
  uint64_t stream_key = 0;  // identifies the queue it runs in (per-thread default streams differ per thread)
  uint64_t issue_ns = 0;    // CLOCK_MONOTONIC at issue
  uint64_t bytes = 0;       // memcpy / collective / p2p bytes
  uint64_t seq = 0;         // NCCL: collective number on the comm, or p2p number to that peer
  int32_t peer = -1;        // NCCL p2p peer
  int16_t comm = -1;        // CommTable slot
  uint8_t device = 0;
  uint8_t path = 0;         // gpu::Path
  uint32_t group_size = 1;  // NCCL ops fused into this record by ncclGroupEnd
};

}  // namespace xtimer
