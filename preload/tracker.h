// The library's state, created at the first hooked CUDA call (nothing runs before it), and the
// launch-path API the hooks use: intern the op's class, take an event pair, record start, call
// the real function, record end, queue the record for the poller. Bounded and lock-free.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "preload/comm_table.h"
#include "preload/config.h"
#include "preload/event_pool.h"
#include "preload/own_gpu_calls.h"
#include "preload/inflight_op.h"
#include "preload/mpmc_queue.h"
#include "preload/op_class.h"
#include "preload/op_record.h"

namespace xtimer {

class AgentLink;
class Poller;
class Watchdog;

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

class Tracker {
 public:
  // The tracker, created on first use; nullptr when the library passes everything through
  // (XTIMER_DISABLE=1, no CUDA loaded, or a child forked after CUDA was used).
  static Tracker* Instance();
  // The tracker if it has been created, without creating it or waiting for its creation (for
  // CUPTI's callbacks, which may run while another thread creates it).
  static Tracker* Current();

  const PreloadConfig& config() const { return config_; }
  OpClassTable& classes() { return classes_; }
  CommTable& comms() { return comms_; }
  EventPools& pools() { return pools_; }
  MpmcQueue<OpRecord>& queue() { return queue_; }
  UntimedCounters& untimed() { return untimed_; }
  Poller& poller() { return *poller_; }

  // How kernels and copies are timed: by CUPTI records (true) or by event pairs; why not CUPTI.
  bool cupti() const { return cupti_; }
  const std::string& timing_note() const { return timing_note_; }
  // Event-pair mode: plain kernels are timed with their end event alone (timed_call.h).
  bool end_only_kernels() const { return end_only_kernels_; }
  AgentLink& agent() { return *agent_; }

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

  // After a real CUDA call has returned: registers the exit handler once. Registering only
  // then puts it after the CUDA runtime's own (registered at its initialisation), so ours runs
  // first at exit, while events can still be queried.
  void AfterRealCall() {
    if (!exit_registered_.load(std::memory_order_relaxed)) [[unlikely]]
      RegisterExitHandler();
  }

  // Called at exit and after fork in the child.
  void Shutdown();
  static void AfterForkInChild();

 private:
  explicit Tracker(const PreloadConfig& config);
  void RegisterExitHandler();
  void ChooseTimingMode();
  void BeginTimed(uint32_t class_id, void* stream, gpu::Path path, bool per_thread, int device, bool end_only,
                  OpTicket* t);
  std::atomic<bool> exit_registered_{false};
  PreloadConfig config_;
  OpClassTable classes_;
  CommTable comms_;
  EventPools pools_;
  MpmcQueue<OpRecord> queue_;
  UntimedCounters untimed_;
  Poller* poller_ = nullptr;
  Watchdog* watchdog_ = nullptr;
  AgentLink* agent_ = nullptr;
  int env_rank_ = -1, env_world_ = -1, env_local_rank_ = -1;
  bool cupti_ = false;
  bool end_only_kernels_ = false;
  std::string timing_note_;
};

}  // namespace xtimer
