// Reusable CUDA events, one pool per device. The launch path takes an event with one lock-free
// pop (a plain kernel in event-pair mode needs one, its end; an op timed with a start/end pair
// two); the poller gives it back when the op completed and grows a pool that runs low. Events
// are never destroyed while the process runs (destroying an event that a stream still
// references is legal but pointless churn).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "preload/base/mpmc_queue.h"
#include "preload/base/own_gpu_calls.h"

namespace xtimer {

// An event's handle: device in the top 8 bits, index in the pool below.
using EventId = uint32_t;
inline constexpr EventId kNoEvent = 0xffffffffu;

class EventPools {
 public:
  static constexpr int kMaxDevices = 64;
  // `max_events` bounds each device's pool (and so the ops in flight per device).
  explicit EventPools(uint32_t max_events);

  // Launch path. Fills the pool from the calling thread the first time a device is seen
  // (one batch); afterwards only pops. kNoEvent when none is free.
  EventId Take(int device, gpu::Path path);
  gpu::Event Get(EventId id) const { return pools_[id >> 24].events[id & 0xffffff]; }
  void Give(EventId id);  // kNoEvent: nothing to give
  // Poller: adds events to pools that run low. Returns how many were created.
  int Grow();
  int DeviceOf(EventId id) const { return static_cast<int>(id >> 24); }

 private:
  struct Pool {
    std::atomic<uint32_t> size{0};  // events[0..size) are created
    std::atomic<bool> initialising{false};
    std::atomic<bool> filling{false};  // one Fill at a time (first launch vs. poller)
    std::atomic<bool> low{false};      // the launch path found it empty
    // Allocated on first use and kept for the life of the process; `free` is published last,
    // so an id popped from it always refers to initialised memory.
    gpu::Event* events = nullptr;  // max_events_ entries
    std::atomic<MpmcQueue<uint32_t>*> free{nullptr};
  };
  bool Fill(int device, Pool& pool, uint32_t count, gpu::Path path, bool switch_device);

  uint32_t max_events_;
  Pool pools_[kMaxDevices];
};

}  // namespace xtimer
