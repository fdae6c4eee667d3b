#include "preload/timing/stream_watch.h"

#include "common/clock.h"

namespace xtimer {
namespace {

static_assert((StreamWatch::kSlots & (StreamWatch::kSlots - 1)) == 0, "kSlots must be a power of two");
static_assert((StreamWatch::kRing & (StreamWatch::kRing - 1)) == 0, "kRing must be a power of two");

// Marks the calling thread: its per-thread default stream is its own.
thread_local char t_thread_marker __attribute__((tls_model("initial-exec")));

// Correlation ids are 32-bit and wrap: `a` came after `b`.
bool After(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) > 0; }

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

enum Tag : uint64_t { kCreated = 0, kLegacy = 1, kPerThread = 2 };

// Created streams are named by their handle (aligned: low bits 0); the legacy default stream
// by its context; a per-thread default stream by its thread and context.
uint64_t KeyOf(void* stream, bool per_thread, void* context) {
  const auto h = reinterpret_cast<uintptr_t>(stream);
  if (h > 2) return h;
  if (h == 2 || (h == 0 && per_thread))
    return (Mix(reinterpret_cast<uintptr_t>(&t_thread_marker) ^ Mix(reinterpret_cast<uintptr_t>(context))) & ~3ull) |
           kPerThread;
  return reinterpret_cast<uintptr_t>(context) | kLegacy;
}

int NameHow(LaunchKind kind) {
  switch (kind) {
    case LaunchKind::kRuntimeKernel: return 0;
    case LaunchKind::kDriverKernel: return 1;
    case LaunchKind::kLibraryKernel: return 3;
    case LaunchKind::kGraph: break;
  }
  return -1;
}

}  // namespace

StreamWatch::Slot* StreamWatch::Claim(uint64_t key) {
  uint32_t i = static_cast<uint32_t>(Mix(key)) & (kSlots - 1);
  for (uint32_t probe = 0; probe < kSlots; ++probe, i = (i + 1) & (kSlots - 1)) {
    uint64_t k = slots_[i].key.load(std::memory_order_acquire);
    if (k == key) return &slots_[i];
    if (k != 0) continue;
    if (slots_[i].key.compare_exchange_strong(k, key, std::memory_order_acq_rel, std::memory_order_acquire) || k == key)
      return &slots_[i];
  }
  return nullptr;
}

uint32_t StreamWatch::OnLaunchEntry(const StreamLaunch& l) {
  if (l.correlation == 0) return 0;
  Slot* s = Claim(KeyOf(l.stream, l.per_thread, l.context));
  if (s == nullptr) {
    untracked_.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  const auto token = static_cast<uint32_t>(s - slots_ + 1);
  const uint32_t at = l.correlation & (kRing - 1);
  ring_func_[at].store(l.func, std::memory_order_relaxed);
  ring_kind_[at].store(static_cast<uint8_t>(l.kind), std::memory_order_relaxed);
  ring_[at].store((static_cast<uint64_t>(l.correlation) << 32) | token, std::memory_order_release);
  s->stream.store(l.stream, std::memory_order_relaxed);
  s->context.store(l.context, std::memory_order_relaxed);
  s->per_thread.store(l.per_thread, std::memory_order_relaxed);
  s->func.store(l.func, std::memory_order_relaxed);
  s->api.store(l.api, std::memory_order_relaxed);
  s->kind.store(static_cast<uint8_t>(l.kind), std::memory_order_relaxed);
  return token;
}

void StreamWatch::OnLaunched(uint32_t token, uint32_t correlation) {
  if (token == 0 || token > kSlots || correlation == 0) return;
  std::atomic<uint32_t>& launched = slots_[token - 1].launched;
  uint32_t cur = launched.load(std::memory_order_relaxed);
  while ((cur == 0 || After(correlation, cur)) &&
         !launched.compare_exchange_weak(cur, correlation, std::memory_order_release, std::memory_order_relaxed)) {
  }
}

void StreamWatch::OnDestroy(void* stream, bool per_thread, void* context) {
  if (reinterpret_cast<uintptr_t>(stream) <= 2) return;  // default streams are never destroyed
  const uint64_t key = KeyOf(stream, per_thread, context);
  uint32_t i = static_cast<uint32_t>(Mix(key)) & (kSlots - 1);
  for (uint32_t probe = 0; probe < kSlots; ++probe, i = (i + 1) & (kSlots - 1)) {
    uint64_t k = slots_[i].key.load(std::memory_order_acquire);
    if (k == 0) return;
    if (k == key) {
      slots_[i].destroyed_at.store(slots_[i].launched.load(std::memory_order_acquire), std::memory_order_relaxed);
      return;
    }
  }
}

void StreamWatch::OnRecord(uint32_t context_id, uint32_t stream_id, uint32_t correlation, uint64_t end_ns) {
  const uint64_t id = (static_cast<uint64_t>(context_id) << 32) | stream_id;
  uint32_t index = 0;  // slot + 1
  const uint64_t e = ring_[correlation & (kRing - 1)].load(std::memory_order_relaxed);
  if (correlation != 0 && (e >> 32) == correlation) {
    index = static_cast<uint32_t>(e);
    by_stream_id_[id] = index;  // learnt (or learnt again: a handle reused by a new stream)
  } else if (auto it = by_stream_id_.find(id); it != by_stream_id_.end()) {
    index = it->second;  // a launch whose id the ring no longer holds, or a copy on the stream
  }
  if (index == 0 || index > kSlots) return;
  Slot& s = slots_[index - 1];
  if (s.done == 0 || After(correlation, s.done)) s.done = correlation;
  if (end_ns > s.progress_ns) s.progress_ns = end_ns;
}

uint64_t StreamWatch::StreamOf(uint32_t context_id, uint32_t stream_id, uint64_t otherwise) const {
  auto it = by_stream_id_.find((static_cast<uint64_t>(context_id) << 32) | stream_id);
  if (it == by_stream_id_.end()) return otherwise;
  const auto h = reinterpret_cast<uintptr_t>(slots_[it->second - 1].stream.load(std::memory_order_relaxed));
  return h == 1 ? 0 : h;  // CU_STREAM_LEGACY: the hooks' stream 0
}

bool StreamWatch::Pending(const Slot& s, uint32_t* launched) const {
  *launched = s.launched.load(std::memory_order_acquire);
  return *launched != 0 && (s.done == 0 || After(*launched, s.done));
}

bool StreamWatch::Confirm(Slot& s, uint32_t launched) {
  // Never ask a stream that may be capturing (the query would invalidate the capture), nor one
  // that no longer exists or that belongs to another thread (its per-thread default stream).
  if (probe_.capturing()) return true;
  if (s.destroyed_at.load(std::memory_order_relaxed) == launched) return true;
  if (s.per_thread.load(std::memory_order_relaxed)) return true;
  void* stream = s.stream.load(std::memory_order_relaxed);
  const auto h = reinterpret_cast<uintptr_t>(stream);
  if (h == 2) return true;
  return probe_.idle(h > 2 ? stream : nullptr, s.context.load(std::memory_order_relaxed)) != 1;
}

void StreamWatch::AfterFlush(uint64_t flush_ns, double confirm_after_s) {
  last_flush_ns_ = flush_ns;
  for (Slot& s : slots_) {
    if (s.key.load(std::memory_order_acquire) == 0) continue;
    uint32_t launched = 0;
    const bool pending = Pending(s, &launched);
    if (launched == 0) continue;
    if (launched != s.seen) {
      s.seen = launched;
      s.seen_ns = flush_ns;
    }
    if (s.progress_ns == 0) s.progress_ns = flush_ns;  // first seen: launched since the previous flush
    if (!pending) {
      s.progress_ns = flush_ns;
      continue;
    }
    if (s.progress_ns > flush_ns || (flush_ns - s.progress_ns) / 1e9 < confirm_after_s) continue;
    if (!Confirm(s, launched)) {  // idle: the records of its last ops were lost
      s.done = launched;
      s.progress_ns = flush_ns;
      ++records_missed_;
    }
  }
}

void StreamWatch::AppendInflight(InflightOps* out) {
  const uint64_t now = MonotonicNs();
  for (Slot& s : slots_) {
    if (s.key.load(std::memory_order_acquire) == 0) continue;
    uint32_t launched = 0;
    if (!Pending(s, &launched) || s.progress_ns == 0) continue;
    auto kind = static_cast<LaunchKind>(s.kind.load(std::memory_order_relaxed));
    const void* func = s.func.load(std::memory_order_relaxed);
    // The head: the first id after the last completed one that the ring says was launched here
    // (ids are global across streams, so others' launches are skipped; at most the ring's size).
    const auto token = static_cast<uint32_t>(&s - slots_ + 1);
    bool head = false;
    if (s.done != 0) {
      for (uint32_t id = s.done + 1, n = 0; n < kRing && !After(id, launched); ++id, ++n) {
        const uint32_t at = id & (kRing - 1);
        const uint64_t e = ring_[at].load(std::memory_order_acquire);
        if ((e >> 32) != id || static_cast<uint32_t>(e) != token) continue;
        func = ring_func_[at].load(std::memory_order_relaxed);
        kind = static_cast<LaunchKind>(ring_kind_[at].load(std::memory_order_relaxed));
        head = true;
        break;
      }
    }
    if (kind == LaunchKind::kGraph && !head) {
      const char* api = s.api.load(std::memory_order_relaxed);
      s.name = api != nullptr ? api : "cudaGraphLaunch";
      s.named_func = nullptr;
    } else if (kind == LaunchKind::kGraph) {
      s.name = "cudaGraphLaunch";
      s.named_func = nullptr;
    } else if (s.name.empty() || s.named_func != func) {
      s.name = probe_.kernel_name(func, NameHow(kind));
      s.named_func = func;
    }
    InflightOp op;
    op.name = s.name;
    op.kind = OpKind::kKernel;
    op.stream = reinterpret_cast<uintptr_t>(s.stream.load(std::memory_order_relaxed));
    op.running = true;
    op.last_on_stream = true;
    op.head_of_stream = head;
    op.in_flight_s = last_flush_ns_ > s.progress_ns ? (last_flush_ns_ - s.progress_ns) / 1e9 : 0;
    op.since_launch_s = now > s.seen_ns ? (now - s.seen_ns) / 1e9 : 0;
    out->push_back(std::move(op));
  }
}

}  // namespace xtimer
