#include "preload/timing/gpu_clock.h"

#include <algorithm>

#include "common/clock.h"

namespace xtimer {
namespace {
constexpr size_t kBases = 64;  // bases kept per device
constexpr uint64_t kBaseEveryNs = 1000000000ull;
constexpr uint64_t kMaxRecordNs = 200000;  // a base's record call may take this long
}  // namespace

void GpuClock::RecordBase(int device, uint64_t now_ns) {
  DeviceClock& c = clocks_[device];
  if (c.failed) return;
  if (c.stream == nullptr) {
    c.stream = gpu::CreatePrivateStream(device);
    if (c.stream == nullptr) {
      c.failed = true;
      return;
    }
    c.bases.resize(kBases);
  }
  c.last_ns = now_ns;
  Base& b = c.bases[c.next % kBases];
  if (b.event == nullptr) b.event = gpu::CreateEvent(device, gpu::Path::kRuntime, true);
  if (b.event == nullptr) return;
  // The private stream is idle, so the event completes as soon as it is recorded: its GPU time is
  // the host time of the record call. A call that took long (the thread was descheduled) would
  // place every op wrongly by as much: such a base is not kept, the next tick tries again.
  const uint64_t before = MonotonicNs();
  if (!gpu::Record(b.event, c.stream, gpu::Path::kRuntime, false)) return;
  const uint64_t after = MonotonicNs();
  if (after - before > kMaxRecordNs) {
    c.last_ns = 0;  // again at the next tick
    return;
  }
  b.host_ns = before + (after - before) / 2;
  ++c.next;
}

void GpuClock::Tick(uint64_t now_ns) {
  for (size_t d = 0; d < clocks_.size(); ++d)
    if (clocks_[d].next == 0 || now_ns - clocks_[d].last_ns >= kBaseEveryNs) RecordBase(static_cast<int>(d), now_ns);
}

void GpuClock::See(int device) {
  if (device < 0) return;
  if (static_cast<size_t>(device) >= clocks_.size()) clocks_.resize(device + 1);
  // A device seen for the first time gets its first base now: ops issued from now on are placed.
  // The first record (on a new stream) may be too slow to keep: try again at once.
  DeviceClock& c = clocks_[device];
  for (int i = 0; i < 3 && c.next == 0 && c.last_ns == 0 && !c.failed; ++i) RecordBase(device, MonotonicNs());
}

uint64_t GpuClock::HostTimeOf(int device, gpu::Event start, uint64_t issue_ns, bool* base_pending) {
  if (device < 0) return 0;
  See(device);
  DeviceClock& c = clocks_[device];
  // Newest base recorded before the op was issued (so it precedes the op's start on the GPU);
  // for an op issued before the device's first base (launched before the poller first saw the
  // device), the oldest base, with the event before it.
  const Base* base = nullptr;
  for (size_t i = 0; i < std::min(c.next, kBases); ++i) {
    const Base& b = c.bases[(c.next - 1 - i) % kBases];
    if (b.host_ns == 0) continue;
    base = &b;
    if (b.host_ns <= issue_ns) break;
  }
  if (base == nullptr || (base->host_ns > issue_ns && c.next > kBases)) return 0;
  double ms = 0;
  const gpu::Query q = gpu::ElapsedMs(base->event, start, &ms);
  // A base just recorded completes a moment later (its stream is idle): ask again then.
  if (q == gpu::Query::kNotReady && base_pending != nullptr) *base_pending = true;
  if (q != gpu::Query::kDone) return 0;
  const int64_t t = static_cast<int64_t>(base->host_ns) + static_cast<int64_t>(ms * 1e6);
  return t > 0 ? static_cast<uint64_t>(t) : 0;
}

}  // namespace xtimer
