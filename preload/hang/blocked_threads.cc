#include "preload/hang/blocked_threads.h"

#include <sys/syscall.h>
#include <unistd.h>

#include "common/clock.h"

namespace xtimer {
namespace {

struct Slot {
  std::atomic<pid_t> tid{0};  // 0 = free
  std::atomic<const char*> what{nullptr};
  std::atomic<OpKind> kind{OpKind::kSync};
  std::atomic<uint64_t> since_ns{0};  // 0 = not inside a call
};

Slot g_slots[BlockedThreads::kMaxThreads];

// Releases the thread's slot when the thread exits.
struct SlotOwner {
  int slot = -1;
  ~SlotOwner() {
    if (slot >= 0) g_slots[slot].tid.store(0, std::memory_order_release);
  }
};
thread_local SlotOwner t_owner;
// Synchronising calls nest (cudaStreamSynchronize reaching cuStreamSynchronize): only the
// outermost one is recorded, under the name the program called.
thread_local int t_depth __attribute__((tls_model("initial-exec"))) = 0;

int MySlot() {
  if (t_owner.slot >= 0) [[likely]]
    return t_owner.slot;
  pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
  for (int i = 0; i < BlockedThreads::kMaxThreads; ++i) {
    pid_t expected = 0;
    if (g_slots[i].tid.compare_exchange_strong(expected, tid, std::memory_order_acq_rel)) {
      t_owner.slot = i;
      return i;
    }
  }
  return -1;  // more than kMaxThreads threads have synchronised: this one is not watched
}

}  // namespace

BlockedThreads::Scope::Scope(const char* what, OpKind kind) : slot_(t_depth++ == 0 ? MySlot() : -1) {
  if (slot_ < 0) return;
  g_slots[slot_].what.store(what, std::memory_order_relaxed);
  g_slots[slot_].kind.store(kind, std::memory_order_relaxed);
  g_slots[slot_].since_ns.store(MonotonicNs(), std::memory_order_release);
}

BlockedThreads::Scope::~Scope() {
  --t_depth;
  if (slot_ >= 0) g_slots[slot_].since_ns.store(0, std::memory_order_release);
}

std::vector<BlockedCall> BlockedThreads::Snapshot() {
  std::vector<BlockedCall> out;
  for (const Slot& s : g_slots) {
    uint64_t since = s.since_ns.load(std::memory_order_acquire);
    pid_t tid = s.tid.load(std::memory_order_relaxed);
    if (since != 0 && tid != 0)
      out.push_back({tid, s.what.load(std::memory_order_relaxed), s.kind.load(std::memory_order_relaxed), since});
  }
  return out;
}

}  // namespace xtimer
