// GPU event times placed on the host clock: the poller records a "base" event on a private idle
// stream of each device every second, together with the host time; an op's start is then the
// newest base recorded before the op was issued plus elapsed(base, op start). Used by the trace
// (XTIMER_TRACE), the step records (XTIMER_STEPS) and, in event-pair mode, the kernels timed by
// their end event alone (one_event.h). Poller thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "preload/base/own_gpu_calls.h"

namespace xtimer {

class GpuClock {
 public:
  // Poller: keeps base events fresh (one a second) for every device seen.
  void Tick(uint64_t now_ns);
  // Poller: an op ran on `device`; the first time, the device gets its first base.
  void See(int device);
  // Host CLOCK_MONOTONIC of an op's event, given when the op was issued; 0 if unknown. An op
  // issued before the device's first base (recorded when the device is first seen here) is
  // placed from that base, the event being before it.
  // `base_pending` (optional) is set when the base to use has not completed yet (just recorded):
  // the answer is then 0 for now, not for good.
  uint64_t HostTimeOf(int device, gpu::Event start, uint64_t issue_ns, bool* base_pending = nullptr);

 private:
  struct Base {
    gpu::Event event = nullptr;
    uint64_t host_ns = 0;
  };
  struct DeviceClock {
    gpu::Stream stream = nullptr;
    std::vector<Base> bases;  // ring, newest at next-1
    size_t next = 0;
    uint64_t last_ns = 0;  // when the newest base was recorded
    bool failed = false;
  };
  void RecordBase(int device, uint64_t now_ns);
  std::vector<DeviceClock> clocks_;
};

}  // namespace xtimer
