// The launch path's state and API, used by every hook: intern the op's class, take an event
// pair, record start, call the real function, record end, queue the record for the poller.
// Bounded and lock-free. It knows nothing of the threads that read it (the poller, the
// watchdog, the agent link): the tracker (tracker.h) owns it and wires those at start-up.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "preload/base/config.h"
#include "preload/base/inflight_op.h"
#include "preload/base/mpmc_queue.h"
#include "preload/base/own_gpu_calls.h"
#include "preload/timing/comm_table.h"
#include "preload/timing/cupti_backend.h"
#include "preload/timing/event_pool.h"
#include "preload/timing/op_class.h"
#include "preload/timing/op_record.h"

namespace xtimer {

// What the launch path carries between Begin and End of one op.
struct OpTicket {
  OpRecord rec;
  void* stream = nullptr;
  gpu::Path path = gpu::Path::kRuntime;
  bool per_thread = false;  // stream 0 means the per-thread default stream (_ptsz forms)
  bool timed = false;
  bool owned = false;  // CUPTI mode: an external correlation id is pushed for this op's kernels
};

struct UntimedCounters {
  std::atomic<uint64_t> sampled_out{0};    // kernels skipped by XTIMER_KERNEL_SAMPLE
  std::atomic<uint64_t> no_event{0};       // no free event (more than XTIMER_MAX_INFLIGHT in flight)
  std::atomic<uint64_t> record_failed{0};  // the event record was refused (e.g. stream of another context)
  std::atomic<uint64_t> queue_full{0};
  // A one-event kernel launched after an untimed launch of its thread: its end is known, its
  // start is not (one_event.h). Counted by the poller.
  std::atomic<uint64_t> no_start{0};
};

class LaunchPath {
 public:
  const PreloadConfig& config() const { return config_; }
  OpClassTable& classes() { return classes_; }
  CommTable& comms() { return comms_; }
  EventPools& pools() { return pools_; }
  MpmcQueue<OpRecord>& queue() { return queue_; }
  UntimedCounters& untimed() { return untimed_; }

  // How kernels and copies are timed now: by CUPTI records (true) or by event pairs; why not
  // CUPTI. CUPTI mode ends for good when the library hands CUPTI to a profiler
  // (cupti_backend.h, HandOver); plain kernels then keep a start and an end event.
  bool cupti() const { return cupti::Active(); }
  const char* timing_note() const;
  // Event-pair mode: plain kernels are timed with their end event alone (timed_call.h).
  bool end_only_kernels() const { return end_only_kernels_; }

  // Launch path.
  uint32_t Intern(const OpKey& key) {
    uint32_t id = classes_.Intern(key);
    classes_.at(id).launches.fetch_add(1, std::memory_order_relaxed);
    return id;
  }
  bool SampleKernel();
  // `end_only`: record only the op's end event (a plain kernel in event-pair mode, timed_call.h).
  void Begin(uint32_t class_id, void* stream, gpu::Path path, bool per_thread, int device, OpTicket* t,
             bool end_only = false);
  void End(OpTicket* t, bool call_ok);

  // Rank and world: RANK/WORLD_SIZE/LOCAL_RANK, else the largest NCCL communicator, else 0/1.
  RankInfo rank_info();

 protected:
  // Created once, as the tracker's part (tracker.h), which then chooses the timing mode.
  explicit LaunchPath(const PreloadConfig& config);
  ~LaunchPath() = default;
  void ChooseTimingMode();

 private:
  void BeginTimed(uint32_t class_id, void* stream, gpu::Path path, bool per_thread, int device, bool end_only,
                  OpTicket* t);
  PreloadConfig config_;
  OpClassTable classes_;
  CommTable comms_;
  EventPools pools_;
  MpmcQueue<OpRecord> queue_;
  UntimedCounters untimed_;
  int env_rank_ = -1, env_world_ = -1, env_local_rank_ = -1;
  bool end_only_kernels_ = false;
  std::string timing_note_;
};

}  // namespace xtimer
