// Operation classes: what the summary has one line for. A class is interned on the launch path
// with a lock-free open-addressing table (a few loads in the common case); its statistics are
// kept by the poller thread alone. The table is fixed-size; when it is full, new kinds of ops
// fall into one "(other <kind>)" class per timed kind (common/kinds.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "common/kinds.h"
#include "preload/timing/histogram.h"

namespace xtimer {

// Identifies a class. `api` is a string literal (compared by address). The meaning of a..d:
//   kernel     : func = kernel function / CUfunction / graph; a = 1 for a driver CUfunction,
//                a = 2 for a kernel seen in a CUPTI record (func = the poller's copy of its name),
//                a = 3 for a cudaKernel_t / CUkernel (nvcc 13's __cudaLaunchKernel, seen by CUPTI)
//   matmul     : a..d = m, n, k, batch; e = cuBLAS data type
//   collective : a = bytes (nccl-tests "size"), b = NCCL data type, c = comm slot, d = group size
//   p2p        : a = bytes, b = data type, c = comm slot, d = group size
//   memcpy     : a = cudaMemcpyKind; a = -1 for a memset (CUPTI mode)
struct OpKey {
  OpKind kind = OpKind::kKernel;
  const char* api = nullptr;
  const void* func = nullptr;
  int64_t a = 0, b = 0, c = 0, d = 0, e = 0;
  bool operator==(const OpKey&) const = default;
  uint64_t Hash() const;
};

struct OpClass {
  OpKey key;
  std::atomic<uint64_t> launches{0};  // every launch, timed or not (launch path, relaxed)
  // --- poller thread only
  std::string name;                 // resolved lazily (kernel symbol names)
  std::unique_ptr<Histogram> hist;  // allocated at the first completion
  uint64_t bytes = 0;               // sum over timed ops (memcpy, collective, p2p)
};

class OpClassTable {
 public:
  static constexpr uint32_t kMaxClasses = 4096;
  static constexpr uint32_t kNoClass = 0xffffffffu;

  OpClassTable();
  // Launch path: the class id of `key`, interning it on first sight. A plain kernel the calling
  // thread launched lately is found in a small per-thread cache first (no hash, no table).
  uint32_t Intern(const OpKey& key);
  OpClass& at(uint32_t id) { return classes_[id]; }
  uint32_t size() const { return std::min<uint32_t>(next_.load(std::memory_order_acquire), kMaxClasses); }
  // Whether class `id` is initialised (its key written).
  bool Ready(uint32_t id) const { return ready_[id].load(std::memory_order_acquire); }

 private:
  static constexpr uint32_t kSlots = kMaxClasses * 2;  // power of two, load <= 50%
  struct Slot {
    std::atomic<uint64_t> hash{0};       // 0 = empty
    std::atomic<uint32_t> id{kNoClass};  // kNoClass while the inserting thread fills the class
  };
  uint32_t Overflow(OpKind kind);
  uint32_t InternInTable(const OpKey& key);

  std::unique_ptr<Slot[]> slots_;
  std::unique_ptr<OpClass[]> classes_;
  std::unique_ptr<std::atomic<bool>[]> ready_;
  std::atomic<uint32_t> next_{0};
  uint32_t serial_;  // tells the per-thread cache's entries of two tables apart (tests make several)
};

}  // namespace xtimer
