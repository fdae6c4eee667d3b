#include "preload/timing/launch_path.h"

#include "common/clock.h"
#include "common/identity.h"
#include "common/log.h"

namespace xtimer {
namespace {

thread_local uint64_t t_sample_counter __attribute__((tls_model("initial-exec"))) = 0;
thread_local char t_thread_marker __attribute__((tls_model("initial-exec")));
// A launch of this thread went untimed since its last timed op (OpRecord::after_untimed).
thread_local bool t_missed __attribute__((tls_model("initial-exec"))) = false;

// The stream a record is ordered in. Handles 0, 1 (legacy) and 2 (per-thread) are per device;
// the per-thread default stream is also per thread.
uint64_t StreamKey(void* stream, bool per_thread, int device) {
  uint64_t s = reinterpret_cast<uintptr_t>(stream);
  if (s > 2) return s;
  if (s == 2 || (s == 0 && per_thread))
    return (reinterpret_cast<uintptr_t>(&t_thread_marker) << 8) | (static_cast<uint64_t>(device) << 2) | 2;
  return (static_cast<uint64_t>(device) << 2) | 1;
}

}  // namespace

LaunchPath::LaunchPath(const PreloadConfig& config)
    : config_(config),
      pools_(static_cast<uint32_t>(2 * config.max_inflight)),  // a start and an end per op at most
      queue_(static_cast<size_t>(config.max_inflight)) {
  const RankEnv env = ReadRankEnv();
  env_rank_ = env.rank;
  env_world_ = env.world_size;
  env_local_rank_ = env.local_rank;
  comms_.EnablePrints(config.desync);
}

bool LaunchPath::SampleKernel() {
  int64_t n = config_.kernel_sample;
  if (n == 1) return true;
  if (n == 0) return false;
  return (++t_sample_counter % static_cast<uint64_t>(n)) == 0;
}

void LaunchPath::ChooseTimingMode() {
  // Sampled kernels keep their pairs: the launches between two timed ones run unseen, so the
  // end of the op before a kernel is not its start. (So no launch is ever sampled out while
  // kernels are end-only: only refused events and a full queue make OpRecord::after_untimed.)
  end_only_kernels_ = !config_.kernel_start_event && config_.kernel_sample == 1;
  if (!config_.cupti) {
    timing_note_ = "XTIMER_CUPTI=0";
  } else if (cupti::Start(&timing_note_)) {
    end_only_kernels_ = false;  // plain kernels pass straight through (after a hand-over: a pair each)
    Log(LogLevel::kDebug, "timing kernels, copies and memsets from CUPTI activity records");
    return;
  }
  Log(LogLevel::kInfo, "CUPTI not used (%s): kernels are timed with event pairs, only when launched through a hook",
      timing_note_.c_str());
}

const char* LaunchPath::timing_note() const {
  const char* handed_over = cupti::HandOverNote();
  return handed_over != nullptr ? handed_over : timing_note_.c_str();
}

void LaunchPath::Begin(uint32_t class_id, void* stream, gpu::Path path, bool per_thread, int device, OpTicket* t,
                       bool end_only) {
  BeginTimed(class_id, stream, path, per_thread, device, end_only, t);
  // CUPTI mode: the kernels this matmul/collective launches are timed by its pair already.
  t->owned = cupti() && classes_.at(class_id).key.kind != OpKind::kKernel;
  if (t->owned) cupti::EnterOwnedCall(class_id);
}

void LaunchPath::BeginTimed(uint32_t class_id, void* stream, gpu::Path path, bool per_thread, int device, bool end_only,
                            OpTicket* t) {
  t->stream = stream;
  t->path = path;
  t->per_thread = per_thread;
  t->timed = false;
  t->rec.class_id = class_id;
  if (device < 0) device = gpu::CurrentDevice(path);
  EventId end = pools_.Take(device, path);
  EventId start = end == kNoEvent || end_only ? kNoEvent : pools_.Take(device, path);
  if (end == kNoEvent || (start == kNoEvent && !end_only)) {
    pools_.Give(end);
    untimed_.no_event.fetch_add(1, std::memory_order_relaxed);
    t_missed = true;
    return;
  }
  if (start != kNoEvent && !gpu::Record(pools_.Get(start), stream, path, per_thread)) {
    pools_.Give(start);
    pools_.Give(end);
    untimed_.record_failed.fetch_add(1, std::memory_order_relaxed);
    t_missed = true;
    return;
  }
  t->rec.start = start;
  t->rec.end = end;
  t->rec.device = static_cast<uint8_t>(device);
  t->rec.path = static_cast<uint8_t>(path);
  t->rec.stream = reinterpret_cast<uintptr_t>(stream);
  t->rec.stream_key = StreamKey(stream, per_thread, device);
  t->rec.issue_ns = MonotonicNs();
  t->timed = true;
}

void LaunchPath::End(OpTicket* t, bool call_ok) {
  if (t->owned) cupti::LeaveOwnedCall();
  if (!t->timed) return;
  OpRecord& rec = t->rec;
  if (!call_ok) {  // nothing was enqueued; a start event alone is harmless
    pools_.Give(rec.start);
    pools_.Give(rec.end);
    return;
  }
  rec.after_untimed = t_missed;
  if (!gpu::Record(pools_.Get(rec.end), t->stream, t->path, t->per_thread)) {
    untimed_.record_failed.fetch_add(1, std::memory_order_relaxed);
  } else if (!queue_.Push(rec)) {
    untimed_.queue_full.fetch_add(1, std::memory_order_relaxed);
  } else {
    t_missed = false;
    return;
  }
  pools_.Give(rec.start);
  pools_.Give(rec.end);
  t_missed = true;
}

RankInfo LaunchPath::rank_info() {
  RankInfo r;
  if (env_rank_ >= 0 && env_world_ > 0) {
    r.rank = env_rank_;
    r.world_size = env_world_;
  } else if (int slot = comms_.Largest(); slot >= 0) {
    r.rank = comms_.at(slot).rank;
    r.world_size = comms_.at(slot).size;
  }
  r.local_rank = env_local_rank_;
  return r;
}

}  // namespace xtimer
