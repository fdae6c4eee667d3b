#include "preload/timing/event_pool.h"

#include <algorithm>

namespace xtimer {
namespace {
// Made on the first launch of a device, by the launching thread: programs queue hundreds of
// launches ahead of the GPU, so a small first batch would leave the first burst untimed.
// (2048 event creations take a few milliseconds, once.)
constexpr uint32_t kFirstBatch = 2048;
}  // namespace

EventPools::EventPools(uint32_t max_events) : max_events_(std::clamp<uint32_t>(max_events, 32, 1u << 24)) {}

bool EventPools::Fill(int device, Pool& pool, uint32_t count, gpu::Path path, bool switch_device) {
  uint32_t have = pool.size.load(std::memory_order_acquire);
  uint32_t target = std::min(max_events_, have + count);
  for (uint32_t i = have; i < target; ++i) {
    pool.events[i] = gpu::CreateEvent(device, path, switch_device && i == have);
    if (pool.events[i] == nullptr) {
      target = i;
      break;
    }
    pool.size.store(i + 1, std::memory_order_release);
    pool.free.load(std::memory_order_relaxed)->Push((static_cast<uint32_t>(device) << 24) | i);
  }
  return target > have;
}

EventId EventPools::Take(int device, gpu::Path path) {
  if (device < 0 || device >= kMaxDevices) return kNoEvent;
  Pool& pool = pools_[device];
  MpmcQueue<uint32_t>* free = pool.free.load(std::memory_order_acquire);
  if (free == nullptr) [[unlikely]] {
    // First op on this device: one thread allocates and makes a batch; others go untimed
    // meanwhile rather than wait.
    bool expected = false;
    if (!pool.initialising.compare_exchange_strong(expected, true)) return kNoEvent;
    pool.events = new gpu::Event[max_events_]();
    free = new MpmcQueue<uint32_t>(max_events_);
    pool.filling.store(true, std::memory_order_relaxed);
    pool.free.store(free, std::memory_order_release);
    Fill(device, pool, kFirstBatch, path, false);
    pool.filling.store(false, std::memory_order_release);
  }
  uint32_t id;
  if (free->Pop(&id)) return id;
  pool.low.store(true, std::memory_order_relaxed);
  return kNoEvent;
}

void EventPools::Give(EventId id) {
  if (id != kNoEvent) pools_[id >> 24].free.load(std::memory_order_acquire)->Push(id);
}

int EventPools::Grow() {
  int made = 0;
  for (int d = 0; d < kMaxDevices; ++d) {
    Pool& pool = pools_[d];
    MpmcQueue<uint32_t>* free = pool.free.load(std::memory_order_acquire);
    if (free == nullptr) continue;
    uint32_t size = pool.size.load(std::memory_order_acquire);
    // Keep at least half the pool free, so bursts find events without waiting for the poller.
    bool low = pool.low.exchange(false, std::memory_order_relaxed) || free->ApproxSize() < size / 2;
    if (!low || size >= max_events_) continue;
    bool idle = false;
    if (!pool.filling.compare_exchange_strong(idle, true, std::memory_order_acquire)) continue;
    Fill(d, pool, std::max<uint32_t>(size, kFirstBatch), gpu::Path::kRuntime, true);
    made += static_cast<int>(pool.size.load(std::memory_order_relaxed) - size);
    pool.filling.store(false, std::memory_order_release);
  }
  return made;
}

}  // namespace xtimer
