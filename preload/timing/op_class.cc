#include "preload/timing/op_class.h"

#include <algorithm>

namespace xtimer {
namespace {

// Per thread, the class of the plain kernels it launched lately, direct-mapped by function: a
// launch skips the hash and the table when its kernel is here. Classes are never removed, so an
// entry stays right. 1 KiB of initial-exec TLS.
struct KernelEntry {
  const void* func = nullptr;
  uint32_t id = 0;
  uint32_t tag = 0;  // table serial << 1 | key.a (0: runtime stub, 1: CUfunction); 0 = empty
};
constexpr size_t kKernelEntries = 64;
thread_local KernelEntry t_kernels[kKernelEntries] __attribute__((tls_model("initial-exec")));
std::atomic<uint32_t> g_next_serial{1};

}  // namespace

uint64_t OpKey::Hash() const {
  // One multiply per field, one final avalanche (splitmix64's finaliser): this runs on every
  // launch. Never returns 0 (the empty-slot marker).
  auto step = [](uint64_t h, uint64_t v) { return ((h ^ v) * 0x9e3779b97f4a7c15ull) ^ (h >> 32); };
  uint64_t h = static_cast<uint64_t>(kind) + 1;
  h = step(h, reinterpret_cast<uintptr_t>(api));
  h = step(h, reinterpret_cast<uintptr_t>(func));
  h = step(h, static_cast<uint64_t>(a));
  h = step(h, static_cast<uint64_t>(b));
  h = step(h, static_cast<uint64_t>(c));
  h = step(h, static_cast<uint64_t>(d));
  h = step(h, static_cast<uint64_t>(e));
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 29;
  return h == 0 ? 1 : h;
}

OpClassTable::OpClassTable()
    : slots_(new Slot[kSlots]),
      classes_(new OpClass[kMaxClasses]),
      ready_(new std::atomic<bool>[kMaxClasses]),
      serial_(g_next_serial.fetch_add(1, std::memory_order_relaxed)) {
  for (uint32_t i = 0; i < kMaxClasses; ++i) ready_[i].store(false, std::memory_order_relaxed);
  // The first ids are the per-kind overflow classes.
  for (int k = 0; k < kTimedOpKinds; ++k) {
    OpClass& c = classes_[k];
    c.key.kind = static_cast<OpKind>(k);
    c.key.api = "(other)";
    c.name = std::string("(other ") + Name(c.key.kind) + ")";
    ready_[k].store(true, std::memory_order_release);
  }
  next_.store(static_cast<uint32_t>(kTimedOpKinds), std::memory_order_release);
}

uint32_t OpClassTable::Overflow(OpKind kind) { return static_cast<uint32_t>(kind); }

uint32_t OpClassTable::Intern(const OpKey& key) {
  const bool cached = key.kind == OpKind::kKernel && key.api == nullptr && (key.a == 0 || key.a == 1) && key.b == 0 &&
                      key.c == 0 && key.d == 0 && key.e == 0;
  if (!cached) return InternInTable(key);
  KernelEntry& e = t_kernels[(reinterpret_cast<uintptr_t>(key.func) >> 4) & (kKernelEntries - 1)];
  const uint32_t tag = serial_ << 1 | static_cast<uint32_t>(key.a);
  if (e.tag == tag && e.func == key.func) return e.id;
  const uint32_t id = InternInTable(key);
  e = KernelEntry{key.func, id, tag};
  return id;
}

uint32_t OpClassTable::InternInTable(const OpKey& key) {
  const uint64_t h = key.Hash();
  for (uint32_t probe = 0, i = static_cast<uint32_t>(h) & (kSlots - 1); probe < kSlots;
       ++probe, i = (i + 1) & (kSlots - 1)) {
    Slot& s = slots_[i];
    uint64_t cur = s.hash.load(std::memory_order_acquire);
    if (cur == 0) {
      if (!s.hash.compare_exchange_strong(cur, h, std::memory_order_acq_rel)) {
        if (cur != h) continue;  // someone else took the slot for another key
      } else {
        // We own the slot: create the class.
        uint32_t id = next_.fetch_add(1, std::memory_order_relaxed);
        if (id >= kMaxClasses) {
          id = Overflow(key.kind);
        } else {
          classes_[id].key = key;
          ready_[id].store(true, std::memory_order_release);
        }
        s.id.store(id, std::memory_order_release);
        return id;
      }
    }
    if (cur != h) continue;
    // Same hash: wait (briefly) for the inserting thread to publish the id, then compare keys.
    uint32_t id = s.id.load(std::memory_order_acquire);
    for (int spin = 0; id == kNoClass && spin < 1000; ++spin) id = s.id.load(std::memory_order_acquire);
    if (id == kNoClass) return Overflow(key.kind);
    if (id < static_cast<uint32_t>(kTimedOpKinds) || classes_[id].key == key) return id;
  }
  return Overflow(key.kind);
}

}  // namespace xtimer
