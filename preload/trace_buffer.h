// The last N completed ops for the Chrome trace (XTIMER_TRACE=N), with GPU start times placed
// on the host clock: the poller records a "base" event on a private idle stream every second
// together with the host time; an op's start is base host time + elapsed(base, op start).
// Poller thread only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "preload/own_gpu_calls.h"

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
  // Poller: keeps base events fresh for every device seen.
  void Tick(uint64_t now_ns);
  // Host time of an op's start event, given when it was issued; 0 if unknown.
  uint64_t HostTimeOf(int device, gpu::Event start, uint64_t issue_ns);
  void Add(const TraceEntry& e);
  // Oldest first.
  std::vector<TraceEntry> Entries() const;

 private:
  struct Base {
    gpu::Event event = nullptr;
    uint64_t host_ns = 0;
  };
  struct DeviceClock {
    gpu::Stream stream = nullptr;
    std::vector<Base> bases;  // ring, newest at next-1
    size_t next = 0;
    bool failed = false;
  };
  size_t capacity_ = 0;
  std::vector<TraceEntry> ring_;
  size_t head_ = 0;
  std::vector<DeviceClock> clocks_;
  uint64_t last_tick_ns_ = 0;
};

}  // namespace xtimer
