// Where the GPU start of a plain kernel timed by its end event alone comes from (timed_call.h,
// "One event"). A stream runs its work in order, so the kernel started when both had happened:
// the op before it on the stream ended, and the launch call was made. The poller keeps, per
// stream, the end of the last op it completed (`StreamTail`) and asks `DeriveStart`.
// Pure arithmetic on host-clock times: tested alone (tests/preload/core_test.cc).
#pragma once

#include <cstdint>

#include "preload/timing/event_pool.h"

namespace xtimer {

// The last op the poller completed on one stream.
struct StreamTail {
  uint64_t end_ns = 0;           // its end on the host clock (gpu_clock.h); 0 = unknown
  EventId end_event = kNoEvent;  // its end event, kept (not given back) while a later op may start there
  uint64_t anchor_ns = 0;        // issue time of the op whose end was last placed by the clock itself
};

enum class StartFrom {
  kPreviousEnd,  // the stream was still busy at the launch: the kernel started when the op before it ended
  kLaunch,       // the stream was idle at the launch: the kernel started when it was launched
  kUnknown,      // a launch between the two went untimed (its time is not known): no duration
};

inline StartFrom DeriveStart(const StreamTail& tail, uint64_t issue_ns, bool after_untimed) {
  if (after_untimed) return StartFrom::kUnknown;
  if (tail.end_event != kNoEvent && tail.end_ns != 0 && tail.end_ns > issue_ns) return StartFrom::kPreviousEnd;
  return StartFrom::kLaunch;
}

}  // namespace xtimer
