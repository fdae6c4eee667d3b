#include "preload/gpu_clock.h"

#include <algorithm>

#include "common/clock.h"

namespace xtimer {
namespace {
constexpr size_t kBases = 64;  // bases kept per device
constexpr uint64_t kBaseEveryNs = 1000000000ull;
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
  if (b.event == nullptr || !gpu::Record(b.event, c.stream, gpu::Path::kRuntime, false)) return;
  // The private stream is idle, so the event completes as soon as it is recorded.
  b.host_ns = now_ns;
  ++c.next;
}

void GpuClock::Tick(uint64_t now_ns) {
  for (size_t d = 0; d < clocks_.size(); ++d)
    if (clocks_[d].next == 0 || now_ns - clocks_[d].last_ns >= kBaseEveryNs) RecordBase(static_cast<int>(d), now_ns);
}

uint64_t GpuClock::HostTimeOf(int device, gpu::Event start, uint64_t issue_ns) {
  if (device < 0) return 0;
  if (static_cast<size_t>(device) >= clocks_.size()) clocks_.resize(device + 1);
  DeviceClock& c = clocks_[device];
  // A device seen for the first time gets its first base now: ops issued from now on are placed.
  if (c.next == 0) RecordBase(device, MonotonicNs());
  // Newest base recorded before the op was issued (so it precedes the op's start on the GPU).
  for (size_t i = 0; i < std::min(c.next, kBases); ++i) {
    const Base& b = c.bases[(c.next - 1 - i) % kBases];
    if (b.host_ns == 0 || b.host_ns > issue_ns) continue;
    double ms = gpu::ElapsedMs(b.event, start);
    if (ms < 0) return 0;
    return b.host_ns + static_cast<uint64_t>(ms * 1e6);
  }
  return 0;
}

}  // namespace xtimer
