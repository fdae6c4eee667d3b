// The last N completed ops for the Chrome trace (XTIMER_TRACE=N), with GPU start times on the
// host clock (gpu_clock.h). Poller thread only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xtimer {

struct TraceEntry {
  uint32_t class_id;
  uint64_t stream;
  uint8_t device;
  uint64_t start_ns;  // host CLOCK_MONOTONIC
  uint64_t dur_ns;
  uint64_t seq;
  int32_t peer;
};

class TraceBuffer {
 public:
  void Configure(size_t capacity) { capacity_ = capacity; }
  bool enabled() const { return capacity_ > 0; }
  void Add(const TraceEntry& e);
  // Oldest first.
  std::vector<TraceEntry> Entries() const;

 private:
  size_t capacity_ = 0;
  std::vector<TraceEntry> ring_;
  size_t head_ = 0;
};

}  // namespace xtimer
