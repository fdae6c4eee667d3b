// Reusable start/end event pairs, one pool per device. The launch path takes a pair with one
// lock-free pop; the poller gives it back when the op completed and grows a pool that runs
// low. Events are never destroyed while the process runs (destroying an event that a stream
// still references is legal but pointless churn).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "preload/own_gpu_calls.h"
#include "preload/mpmc_queue.h"

namespace xtimer {

struct EventPair {
  gpu::Event start = nullptr;
  gpu::Event end = nullptr;
};

// A pair's handle: device in the top 8 bits, index in the pool below.
using PairId = uint32_t;
inline constexpr PairId kNoPair = 0xffffffffu;

class EventPools {
 public:
  static constexpr int kMaxDevices = 64;
  // `max_pairs` bounds each device's pool (and so the ops in flight per device).
  explicit EventPools(uint32_t max_pairs);

  // Launch path. Fills the pool from the calling thread the first time a device is seen
  // (small batch); afterwards only pops. kNoPair when none is free.
  PairId Take(int device, gpu::Path path);
  const EventPair& Get(PairId id) const;
  void Give(PairId id);  // poller
  // Poller: adds pairs to pools that run low. Returns how many were created.
  int Grow();
  int DeviceOf(PairId id) const { return static_cast<int>(id >> 24); }

 private:
  struct Pool {
    std::atomic<uint32_t> size{0};  // pairs[0..size) are created
    std::atomic<bool> initialising{false};
    std::atomic<bool> filling{false};  // one Fill at a time (first launch vs. poller)
    std::atomic<bool> low{false};      // the launch path found it empty
    // Allocated on first use and kept for the life of the process; `free` is published last,
    // so a pair id popped from it always refers to initialised memory.
    EventPair* pairs = nullptr;  // max_pairs_ entries
    std::atomic<MpmcQueue<uint32_t>*> free{nullptr};
  };
  bool Fill(int device, Pool& pool, uint32_t count, gpu::Path path, bool switch_device);

  uint32_t max_pairs_;
  Pool pools_[kMaxDevices];
};

}  // namespace xtimer
