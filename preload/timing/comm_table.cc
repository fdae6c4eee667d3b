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
    if (prints_on_) {
      c.prints.reset(new CallPrint[kPrintSlots]);
      c.prints_read = 0;
    }
    // Publishes the fields above to the fingerprint reader (TakePrints); `ready` to Find.
    c.handle.store(handle, std::memory_order_release);
    c.ready.store(true, std::memory_order_release);
    return i;
  }
}

void CommTable::RecordPrint(int slot, uint64_t seq, const char* api, uint64_t count, int dtype, int redop, int root,
                            uint32_t site) {
  if (slot < 0 || slot >= kMaxComms) return;
  Comm& c = comms_[slot];
  if (!c.prints || seq == 0) return;
  CallPrint& p = c.prints[seq % kPrintSlots];
  p.seq.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  p.count.store(count, std::memory_order_relaxed);
  p.api.store(api, std::memory_order_relaxed);
  p.dtype.store(dtype, std::memory_order_relaxed);
  p.redop.store(redop, std::memory_order_relaxed);
  p.root.store(root, std::memory_order_relaxed);
  p.site.store(site, std::memory_order_relaxed);
  p.seq.store(seq, std::memory_order_release);
}

// True when slot `seq` holds that call or a later one (then out->seq = 0: it was overwritten);
// false when it is not written yet.
bool CommTable::ReadPrint(Comm& c, uint64_t seq, CallPrintCopy* out) const {
  const CallPrint& p = c.prints[seq % kPrintSlots];
  const uint64_t before = p.seq.load(std::memory_order_acquire);
  if (before < seq) return false;
  out->count = p.count.load(std::memory_order_relaxed);
  out->api = p.api.load(std::memory_order_relaxed);
  out->dtype = p.dtype.load(std::memory_order_relaxed);
  out->redop = p.redop.load(std::memory_order_relaxed);
  out->root = p.root.load(std::memory_order_relaxed);
  out->site = p.site.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint64_t after = p.seq.load(std::memory_order_relaxed);
  out->seq = before == seq && after == seq ? seq : 0;
  return true;
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
