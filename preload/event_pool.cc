#include "preload/event_pool.h"

#include <algorithm>

namespace xtimer {
namespace {
// Made on the first launch of a device, by the launching thread: programs queue hundreds of
// launches ahead of the GPU, so a small first batch would leave the first burst untimed.
// (2048 event creations take a few milliseconds, once.)
constexpr uint32_t kFirstBatch = 1024;
}  // namespace

EventPools::EventPools(uint32_t max_pairs) : max_pairs_(std::clamp<uint32_t>(max_pairs, 16, 1u << 24)) {}

bool EventPools::Fill(int device, Pool& pool, uint32_t count, gpu::Path path, bool switch_device) {
  uint32_t have = pool.size.load(std::memory_order_acquire);
  uint32_t target = std::min(max_pairs_, have + count);
  for (uint32_t i = have; i < target; ++i) {
    EventPair& p = pool.pairs[i];
    p.start = gpu::CreateEvent(device, path, switch_device);
    p.end = p.start ? gpu::CreateEvent(device, path, false) : nullptr;
    if (p.end == nullptr) {
      gpu::DestroyEvent(p.start);
      p.start = nullptr;
      target = i;
      break;
    }
    pool.size.store(i + 1, std::memory_order_release);
    pool.free.load(std::memory_order_relaxed)->Push((static_cast<uint32_t>(device) << 24) | i);
  }
  return target > have;
}

PairId EventPools::Take(int device, gpu::Path path) {
  if (device < 0 || device >= kMaxDevices) return kNoPair;
  Pool& pool = pools_[device];
  MpmcQueue<uint32_t>* free = pool.free.load(std::memory_order_acquire);
  if (free == nullptr) [[unlikely]] {
    // First op on this device: one thread allocates and makes a small batch; others go untimed
    // meanwhile rather than wait.
    bool expected = false;
    if (!pool.initialising.compare_exchange_strong(expected, true)) return kNoPair;
    pool.pairs = new EventPair[max_pairs_];
    free = new MpmcQueue<uint32_t>(max_pairs_);
    pool.filling.store(true, std::memory_order_relaxed);
    pool.free.store(free, std::memory_order_release);
    Fill(device, pool, kFirstBatch, path, false);
    pool.filling.store(false, std::memory_order_release);
  }
  uint32_t id;
  if (free->Pop(&id)) return id;
  pool.low.store(true, std::memory_order_relaxed);
  return kNoPair;
}

const EventPair& EventPools::Get(PairId id) const { return pools_[id >> 24].pairs[id & 0xffffff]; }

void EventPools::Give(PairId id) { pools_[id >> 24].free.load(std::memory_order_acquire)->Push(id); }

int EventPools::Grow() {
  int made = 0;
  for (int d = 0; d < kMaxDevices; ++d) {
    Pool& pool = pools_[d];
    MpmcQueue<uint32_t>* free = pool.free.load(std::memory_order_acquire);
    if (free == nullptr) continue;
    uint32_t size = pool.size.load(std::memory_order_acquire);
    // Keep at least half the pool free, so bursts find pairs without waiting for the poller.
    bool low = pool.low.exchange(false, std::memory_order_relaxed) || free->ApproxSize() < size / 2;
    if (!low || size >= max_pairs_) continue;
    bool idle = false;
    if (!pool.filling.compare_exchange_strong(idle, true, std::memory_order_acquire)) continue;
    Fill(d, pool, std::max<uint32_t>(size, kFirstBatch), gpu::Path::kRuntime, true);
    made += static_cast<int>(pool.size.load(std::memory_order_relaxed) - size);
    pool.filling.store(false, std::memory_order_release);
  }
  return made;
}

}  // namespace xtimer
