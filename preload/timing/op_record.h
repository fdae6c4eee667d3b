// One timed operation as it travels from the launch path to the poller (plain data, copied
// into a lock-free queue).
#pragma once

#include <cstdint>

#include "preload/timing/event_pool.h"

namespace xtimer {

struct OpRecord {
  uint32_t class_id = 0;
  // The op's events. A plain kernel in event-pair mode has only its end (start == kNoEvent): the
  // poller derives its start from the stream's previous op (timed_call.h, "one event").
  EventId start = kNoEvent;
  uint64_t stream = 0;      // the cudaStream_t the op was issued on
  uint64_t stream_key = 0;  // identifies the queue it runs in (per-thread default streams differ per thread)
  uint64_t issue_ns = 0;    // CLOCK_MONOTONIC at issue
  uint64_t bytes = 0;       // memcpy / collective / p2p bytes
  uint64_t seq = 0;         // NCCL: collective number on the comm, or p2p number to that peer
  int32_t peer = -1;        // NCCL p2p peer
  int16_t comm = -1;        // CommTable slot
  uint8_t device = 0;
  uint8_t path : 4 = 0;  // gpu::Path
  // This thread had a launch go untimed since its previous timed op: a one-event kernel's
  // start cannot then be taken from the end of the op before it on the stream.
  uint8_t after_untimed : 1 = 0;
  uint32_t group_size = 1;  // NCCL ops fused into this record by ncclGroupEnd
  EventId end = kNoEvent;
};

static_assert(sizeof(OpRecord) == 64, "one cache line per queued op");

}  // namespace xtimer
