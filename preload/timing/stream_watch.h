// CUPTI mode: which streams have work that has not finished, and how long since each made
// progress, whatever launched the work (the runtime, the driver, a dlsym'd cuLaunchKernelEx, a
// graph replay). Event-pair mode has an in-flight record per hooked op; CUPTI mode times plain
// kernels from activity records, which exist only once a kernel has ended, so a kernel that never
// ends would leave no trace. Here:
//  - launches: CUPTI's API callback for every kernel and graph launch (cupti_backend.cc) notes,
//    per stream, the highest correlation id launched and what (OnLaunchEntry/OnLaunched:
//    lock-free, a handful of atomic stores, no allocation, no clock read);
//  - completions: every kernel, copy and memset record the poller drains (OnRecord) names its
//    stream and correlation id; a stream whose highest launched id has completed is caught up;
//  - judging, after each CUPTI flush (AfterFlush): a stream that is not caught up has made no
//    progress since its last completion (or since it was last seen caught up, or since the flush
//    that first saw its launch). One that has looked so for half the hang timeout is asked directly
//    (cuStreamQuery, never while a capture is in progress): idle means records were lost and it
//    is caught up; busy confirms it.
// Stalled streams reach the watchdog and the stack file as in-flight ops (AppendInflight).
//
// Threads: OnLaunchEntry/OnLaunched/OnDestroy on any launching thread; everything else on the poller thread or
// under the poller's lock (Poller::mu_), which also serialises AppendInflight. No CUDA call of
// its own: what it asks of CUDA goes through a Probe.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "preload/base/inflight_op.h"

namespace xtimer {

// What a launch was, for naming it in a dump.
enum class LaunchKind : uint8_t {
  kRuntimeKernel,  // func: the kernel's host stub (cudaLaunchKernel...)
  kDriverKernel,   // func: a CUfunction (cuLaunchKernel...)
  kLibraryKernel,  // func: a CUkernel / cudaKernel_t (CUDA 13's __cudaLaunchKernel)
  kGraph,          // func: the executable graph; api names the launch call
};

struct StreamLaunch {
  void* stream = nullptr;    // as passed: 0 / CU_STREAM_LEGACY / CU_STREAM_PER_THREAD or a handle
  bool per_thread = false;   // a _ptsz call: stream 0 is the calling thread's default stream
  void* context = nullptr;   // the calling thread's CUcontext (the legacy stream's owner)
  uint32_t correlation = 0;  // CUPTI's id for the call, which its kernels' records carry
  const void* func = nullptr;
  LaunchKind kind = LaunchKind::kRuntimeKernel;
  const char* api = nullptr;  // string literal, for graph launches
};

class StreamWatch {
 public:
  static constexpr uint32_t kSlots = 512;  // streams tracked; more are counted in untracked()
  static constexpr uint32_t kRing = 8192;  // recent correlation id -> stream, for the records

  // What the watch asks of CUDA (poller thread; replaced in unit tests).
  struct Probe {
    // Whether a stream has finished all its work: `stream`, or with nullptr the legacy default
    // stream of `context`. 1 idle, 0 busy, -1 cannot tell.
    int (*idle)(void* stream, void* context);
    // The display name of a launched kernel (op_names.h, KernelNameOf).
    std::string (*kernel_name)(const void* func, int how);
    // Whether a stream capture may be in progress somewhere (then no stream is asked).
    bool (*capturing)();
  };
  explicit StreamWatch(const Probe& probe) : probe_(probe) {}

  // Launch path (CUPTI's callbacks, on the launching thread). At the call's entry: its stream's
  // slot, what it launches, and its correlation id noted for the records (so that one that comes
  // back before the exit, of a kernel that ended at once, still finds it); returns a token for
  // the exit, 0 if the table is full. At the exit, if the call succeeded: the launch counts.
  uint32_t OnLaunchEntry(const StreamLaunch& launch);
  void OnLaunched(uint32_t token, uint32_t correlation);
  // A stream is being destroyed: it can no longer be queried.
  void OnDestroy(void* stream, bool per_thread, void* context);

  // Poller thread, under the poller's lock.
  // One completed kernel, copy or memset record (CUPTI's context and stream ids, its correlation
  // id, when it ended on the host clock).
  void OnRecord(uint32_t context_id, uint32_t stream_id, uint32_t correlation, uint64_t end_ns);
  // After a flush at `flush_ns` and the drain of its records: decides what is caught up, and asks
  // streams that look stalled for `confirm_after_s` or more whether they are really busy.
  void AfterFlush(uint64_t flush_ns, double confirm_after_s);
  // One op per stream with unfinished work and no progress since, in_flight_s = seconds without
  // progress as of the latest flush. Named after the oldest launch on it that has not finished
  // (the one the stream waits at: a kernel that never ends, or one waiting for another stream)
  // while the ring still holds it, else after the last launch (`head` false).
  void AppendInflight(InflightOps* out);

  // The handle of the stream CUPTI names (context id, stream id), as the hooks see it (0 for
  // the legacy default stream), once a record of a launch on it was seen; else `otherwise`.
  uint64_t StreamOf(uint32_t context_id, uint32_t stream_id, uint64_t otherwise) const;

  uint64_t untracked() const { return untracked_.load(std::memory_order_relaxed); }
  // Streams found idle by a query while their records said otherwise (records CUPTI lost).
  uint64_t records_missed() const { return records_missed_; }

 private:
  struct Slot {
    std::atomic<uint64_t> key{0};  // 0: free; claimed once, never released
    // Written by launching threads.
    std::atomic<uint32_t> launched{0};  // highest correlation id launched (serial order)
    std::atomic<const void*> func{nullptr};
    std::atomic<const char*> api{nullptr};
    std::atomic<uint8_t> kind{0};
    std::atomic<void*> stream{nullptr};
    std::atomic<void*> context{nullptr};
    std::atomic<bool> per_thread{false};
    std::atomic<uint32_t> destroyed_at{0};  // `launched` when the stream was destroyed, else 0
    // Poller (under its lock).
    uint32_t done = 0;         // highest correlation id seen completed
    uint64_t progress_ns = 0;  // last completion, or last time seen caught up; 0 = never seen
    uint32_t seen = 0;         // `launched` at the latest flush
    uint64_t seen_ns = 0;      // the flush that first saw it (the launch is at most a flush older)
    bool confirmed = false;    // the latest query (this flush) said busy, or none is possible
    const void* named_func = nullptr;
    std::string name;
  };
  Slot* Claim(uint64_t key);
  bool Pending(const Slot& s, uint32_t* launched) const;
  bool Confirm(Slot& s, uint32_t launched);

  const Probe probe_;
  Slot slots_[kSlots];
  std::atomic<uint64_t> ring_[kRing] = {};  // (correlation << 32) | slot index + 1
  // What each ring entry launched (written with it; read only at a dump, to name a stream's head).
  std::atomic<const void*> ring_func_[kRing] = {};
  std::atomic<uint8_t> ring_kind_[kRing] = {};
  std::atomic<uint64_t> untracked_{0};
  // Poller only.
  std::unordered_map<uint64_t, uint32_t> by_stream_id_;  // (context id << 32 | stream id) -> slot
  uint64_t last_flush_ns_ = 0;
  uint64_t records_missed_ = 0;
};

}  // namespace xtimer
