// Bounded lock-free multi-producer multi-consumer queue (Dmitry Vyukov's design: one sequence
// number per cell). Push and Pop never block and never allocate; a full queue refuses the push.
// Used on the launch path, so both operations are a handful of atomic operations.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace xtimer {

template <typename T>
class MpmcQueue {
 public:
  // capacity is rounded up to a power of two (at least 2).
  explicit MpmcQueue(size_t capacity) {
    size_t n = 2;
    while (n < capacity) n <<= 1;
    mask_ = n - 1;
    cells_ = std::make_unique<Cell[]>(n);
    for (size_t i = 0; i < n; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
  }

  bool Push(const T& value) {
    size_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[pos & mask_];
      size_t seq = cell.seq.load(std::memory_order_acquire);
      intptr_t diff = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          cell.value = value;
          cell.seq.store(pos + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;  // full
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  bool Pop(T* out) {
    size_t pos = head_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[pos & mask_];
      size_t seq = cell.seq.load(std::memory_order_acquire);
      intptr_t diff = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos + 1);
      if (diff == 0) {
        if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          *out = cell.value;
          cell.seq.store(pos + mask_ + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;  // empty
      } else {
        pos = head_.load(std::memory_order_relaxed);
      }
    }
  }

  size_t capacity() const { return mask_ + 1; }
  // Approximate (racy by nature); for decisions that tolerate staleness.
  size_t ApproxSize() const { return tail_.load(std::memory_order_relaxed) - head_.load(std::memory_order_relaxed); }

 private:
  struct Cell {
    std::atomic<size_t> seq;
    T value;
  };
  std::unique_ptr<Cell[]> cells_;
  size_t mask_ = 0;
  alignas(64) std::atomic<size_t> tail_{0};
  alignas(64) std::atomic<size_t> head_{0};
};

}  // namespace xtimer
