#include "preload/timing/trace_buffer.h"

namespace xtimer {

void TraceBuffer::Add(const TraceEntry& e) {
  if (!enabled()) return;
  if (ring_.size() < capacity_) {
    ring_.push_back(e);
  } else {
    ring_[head_] = e;
    head_ = (head_ + 1) % capacity_;
  }
}

std::vector<TraceEntry> TraceBuffer::Entries() const {
  std::vector<TraceEntry> out;
  out.reserve(ring_.size());
  for (size_t i = 0; i < ring_.size(); ++i) out.push_back(ring_[(head_ + i) % ring_.size()]);
  return out;
}

}  // namespace xtimer
