#include "preload/gpu_clock.h"

#include <algorithm>

namespace xtimer {
namespace {
constexpr size_t kBases = 64;  // bases kept per device
constexpr uint64_t kBaseEveryNs = 1000000000ull;
}  // namespace

void GpuClock::Tick(uint64_t now_ns) {
  if (now_ns - last_tick_ns_ < kBaseEveryNs) return;
  last_tick_ns_ = now_ns;
  for (size_t d = 0; d < clocks_.size(); ++d) {
    DeviceClock& c = clocks_[d];
    if (c.failed) continue;
    if (c.stream == nullptr) {
      c.stream = gpu::CreatePrivateStream(static_cast<int>(d));
      if (c.stream == nullptr) {
        c.failed = true;
        continue;
      }
      c.bases.resize(kBases);
    }
    Base& b = c.bases[c.next % kBases];
    if (b.event == nullptr) b.event = gpu::CreateEvent(static_cast<int>(d), gpu::Path::kRuntime, true);
    if (b.event == nullptr || !gpu::Record(b.event, c.stream, gpu::Path::kRuntime, false)) continue;
    // The private stream is idle, so the event completes as soon as it is recorded.
    b.host_ns = now_ns;
    ++c.next;
  }
}

uint64_t GpuClock::HostTimeOf(int device, gpu::Event start, uint64_t issue_ns) {
  if (device < 0) return 0;
  if (static_cast<size_t>(device) >= clocks_.size()) clocks_.resize(device + 1);
  DeviceClock& c = clocks_[device];
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
