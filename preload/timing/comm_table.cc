#include "preload/timing/comm_table.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace xtimer {

void CommIdOf(const void* key, size_t len, char out[9]) {
  uint32_t h = 2166136261u;
  const auto* p = static_cast<const unsigned char*>(key);
  for (size_t i = 0; i < len; ++i) {
    h ^= p[i];
    h *= 16777619u;
  }
  std::snprintf(out, 9, "%08x", h);
}

int CommTable::Register(const void* handle, const void* key, size_t key_len, int rank, int size, int device) {
  if (handle == nullptr) return -1;
  Forget(handle);  // a handle may be reused after ncclCommDestroy
  int i = used_.fetch_add(1, std::memory_order_acq_rel);
  if (i >= kMaxComms) {
    used_.store(kMaxComms, std::memory_order_relaxed);
    return -1;
  }
  {
    Comm& c = comms_[i];
    c.handle.store(handle, std::memory_order_relaxed);
    CommIdOf(key, key_len, c.id);
    c.rank = rank;
    c.size = size;
    c.device = device;
    c.collective_seq.store(0, std::memory_order_relaxed);
    c.split_count.store(0, std::memory_order_relaxed);
    if (size > 0) {
      c.p2p_seq.reset(new std::atomic<uint64_t>[size]);
      for (int p = 0; p < size; ++p) c.p2p_seq[p].store(0, std::memory_order_relaxed);
    }
    c.ready.store(true, std::memory_order_release);
    return i;
  }
}

int CommTable::Find(const void* handle) const {
  int used = std::min(used_.load(std::memory_order_acquire), kMaxComms);
  for (int i = 0; i < used; ++i) {
    const Comm& c = comms_[i];
    if (c.handle.load(std::memory_order_relaxed) == handle && c.ready.load(std::memory_order_acquire)) return i;
  }
  return -1;
}

void CommTable::Forget(const void* handle) {
  int used = std::min(used_.load(std::memory_order_acquire), kMaxComms);
  for (int i = 0; i < used; ++i) {
    Comm& c = comms_[i];
    if (c.handle.load(std::memory_order_relaxed) == handle && c.ready.load(std::memory_order_acquire)) {
      c.ready.store(false, std::memory_order_release);
    }
  }
}

int CommTable::Largest() const {
  int best = -1;
  int used = std::min(used_.load(std::memory_order_acquire), kMaxComms);
  for (int i = 0; i < used; ++i) {
    // Slots are never reused, so a forgotten communicator's fields stay valid.
    if (comms_[i].handle.load(std::memory_order_acquire) == nullptr || comms_[i].size <= 0) continue;
    if (best < 0 || comms_[i].size > comms_[best].size) best = i;
  }
  return best;
}

}  // namespace xtimer
