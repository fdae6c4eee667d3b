#include "preload/timing/poller.h"

#include <algorithm>
#include <chrono>

#include "common/clock.h"
#include "common/log.h"
#include "preload/base/internal_thread.h"
#include "preload/graphs/capture_mode.h"
#include "preload/timing/launch_path.h"
#include "preload/timing/op_names.h"
#include "preload/timing/report_writer.h"
#include "preload/timing/stream_watch.h"

namespace xtimer {
namespace {
constexpr size_t kAgentSummaryOps = 200;  // keeps a summary message well under the socket's limit
constexpr uint64_t kAgentSummaryEveryNs = 2000000000ull;
// A stream's tail is kept this long after its last op completed: an op issued before that end
// may still be on its way into the queue (its launch call had not returned).
constexpr uint64_t kTailKeepNs = 1000000000ull;
// A chain of one-event kernels is placed on the host clock from its first one (the stream was
// idle) by GPU time differences; after this long the next end is placed afresh (gpu_clock.h), so
// the GPU's and the host's clock rates cannot drift apart along a stream that is never idle.
constexpr uint64_t kChainAnchorNs = 1000000000ull;
}  // namespace

Poller::Poller(LaunchPath& launch, StepSink* steps, SummarySink* summaries)
    : launch_(launch), summaries_(summaries), steps_(steps) {
  trace_.Configure(static_cast<size_t>(launch.config().trace_ops));
}

void Poller::Start() {
  one_event_ = launch_.end_only_kernels();
  thread_ = StartInternalThread("xtimer-poller", [this] {
    // Our event queries must never invalidate a CUDA graph capture running elsewhere.
    UseRelaxedCaptureModeOnThisThread();
    Loop();
  });
}

void Poller::Loop() {
  const double interval = launch_.config().report_interval_s;
  next_report_ns_ = interval > 0 ? MonotonicNs() + static_cast<uint64_t>(interval * 1e9) : UINT64_MAX;
  while (!stop_.load(std::memory_order_acquire)) {
    heartbeat_ns_.store(MonotonicNs(), std::memory_order_relaxed);
    const uint64_t flushed = cupti::Flush(false);  // outside mu_: the watchdog's Snapshot must not wait for CUPTI
    {
      MutexLock lock(mu_);
      DrainQueue();
      CompleteFinished();
      cupti::Drain([](void* self, const CuptiOp& op) { static_cast<Poller*>(self)->AccountCupti(op); }, this);
      // Streams are judged only on a flush: every op that had ended by then has been drained.
      if (StreamWatch* watch = cupti::Watch(); watch != nullptr && flushed != 0)
        watch->AfterFlush(flushed, launch_.config().hang_timeout_s / 2);
      uint64_t now = MonotonicNs();
      if (trace_.enabled() || steps_ != nullptr || one_event_) clock_.Tick(now);
      if (steps_ != nullptr) steps_->Collect(now, OldestPending());
      if (now >= next_report_ns_) {
        WriteReports(false);
        next_report_ns_ = now + static_cast<uint64_t>(interval * 1e9);
      }
      // The node agent's metrics want fresher statistics than the files: every 2 s.
      if (summaries_ != nullptr && summaries_->active() && now >= next_agent_summary_ns_) {
        summaries_->OfferSummary(SummaryJson(launch_, false, kAgentSummaryOps));
        next_agent_summary_ns_ = now + kAgentSummaryEveryNs;
      }
    }
    if (steps_ != nullptr) steps_->Publish(MonotonicNs());  // file and agent, outside mu_
    launch_.pools().Grow();
    // Every 5 ms. Durations come from GPU events and CUPTI records, so how late a completion is
    // noticed is no timing error; what it bounds (an in-flight op's host-clock start, the queue
    // and pools in use) needs no more. Each wake-up can preempt a training thread: at 1 ms they
    // cost a host-bound step on a shared core more than all the hooks (docs/benchmarks.md).
    MutexLock lock(wake_mu_);
    wake_.WaitFor(wake_mu_, std::chrono::milliseconds(5), [this] { return stop_.load(std::memory_order_acquire); });
  }
}

void Poller::DrainQueue() {
  OpRecord rec;
  uint64_t key = 0;
  StreamOps* s = nullptr;  // the stream of the previous record (map nodes do not move)
  while (launch_.queue().Pop(&rec)) {
    // One-event kernels are placed on the host clock: a device gets its first reference now.
    if (one_event_ && (s == nullptr || rec.device != s->fifo.back().rec.device)) clock_.See(rec.device);
    if (s == nullptr || rec.stream_key != key) {
      key = rec.stream_key;
      s = &streams_[key];
    }
    s->fifo.push_back(Pending{rec, 0});
    if (steps_ != nullptr) steps_->OnIssued(rec);
  }
}

uint64_t Poller::OldestPending() const {
  uint64_t oldest = UINT64_MAX;
  for (const auto& [key, s] : streams_)
    if (!s.fifo.empty()) oldest = std::min(oldest, s.fifo.front().rec.issue_ns);
  return oldest;
}

void Poller::CompleteFinished() {
  const uint64_t now = MonotonicNs();
  EventPools& pools = launch_.pools();
  for (auto it = streams_.begin(); it != streams_.end();) {
    auto& fifo = it->second.fifo;
    StreamTail& tail = it->second.tail;
    while (!fifo.empty()) {
      Pending& head = fifo.front();
      if (Complete(tail, head) == gpu::Query::kNotReady) {
        // A one-event kernel at the head runs: what the stream had before it has completed.
        if (head.started_ns == 0 &&
            (head.rec.start == kNoEvent || gpu::QueryEvent(pools.Get(head.rec.start)) == gpu::Query::kDone))
          head.started_ns = now;
        break;
      }
      fifo.pop_front();
    }
    if (!fifo.empty()) {
      ++it;
    } else if (tail.end_event != kNoEvent && tail.end_ns != 0 && tail.end_ns + kTailKeepNs > now) {
      ++it;
    } else {
      pools.Give(tail.end_event);
      it = streams_.erase(it);
    }
  }
}

gpu::Query Poller::Complete(StreamTail& tail, const Pending& p) {
  EventPools& pools = launch_.pools();
  const OpRecord& r = p.rec;
  const gpu::Event end = pools.Get(r.end);
  // The GPU start on the host clock costs one more event query: for pairs only where the trace,
  // the steps (once found; a job with no collectives never has any) or one-event kernels
  // after it on the stream need it.
  const bool for_steps = steps_ != nullptr && steps_->wants_gpu();
  bool timed = false;
  uint64_t dur_ns = 0, start_ns = 0, end_ns = 0;
  bool base_pending = false;  // the clock's reference has not completed: complete the op later
  auto host_end = [&] { return clock_.HostTimeOf(r.device, end, r.issue_ns, &base_pending); };
  // One call both asks whether the op completed and, where it can, times it.
  double ms = 0;
  gpu::Query q;
  if (r.start != kNoEvent) {
    const gpu::Event start = pools.Get(r.start);
    q = gpu::ElapsedMs(start, end, &ms);
    if (q == gpu::Query::kNotReady) return q;
    timed = q == gpu::Query::kDone && ms >= 0;
    dur_ns = timed ? static_cast<uint64_t>(ms * 1e6 + 0.5) : 0;
    if (steps_ != nullptr) clock_.See(r.device);  // a reference before the steps are found
    if (timed && (one_event_ || trace_.enabled() || for_steps)) {
      start_ns = clock_.HostTimeOf(r.device, start, r.issue_ns, &base_pending);
      if (base_pending) return gpu::Query::kNotReady;
      end_ns = start_ns != 0 ? start_ns + dur_ns : 0;
    }
    tail.anchor_ns = r.issue_ns;
    pools.Give(r.start);
  } else {
    switch (DeriveStart(tail, r.issue_ns, r.after_untimed)) {
      case StartFrom::kPreviousEnd:
        q = gpu::ElapsedMs(pools.Get(tail.end_event), end, &ms);
        if (q == gpu::Query::kNotReady) return q;
        if (q != gpu::Query::kDone) break;
        timed = true;
        start_ns = tail.end_ns;
        if (r.issue_ns - std::min(r.issue_ns, tail.anchor_ns) < kChainAnchorNs) {
          dur_ns = ms > 0 ? static_cast<uint64_t>(ms * 1e6 + 0.5) : 0;
          end_ns = start_ns + dur_ns;
        } else {  // placed afresh: the chain's clock is anchored again
          end_ns = host_end();
          if (base_pending) return gpu::Query::kNotReady;
          dur_ns = end_ns > start_ns ? end_ns - start_ns : 0;
          tail.anchor_ns = r.issue_ns;
        }
        break;
      case StartFrom::kLaunch:
        q = gpu::QueryEvent(end);
        if (q != gpu::Query::kDone) break;
        end_ns = host_end();
        if (base_pending) return gpu::Query::kNotReady;
        if (end_ns == 0) {  // not placed on the host clock: its start is not known
          launch_.untimed().no_start.fetch_add(1, std::memory_order_relaxed);
          break;
        }
        timed = true;
        start_ns = r.issue_ns;
        dur_ns = end_ns > start_ns ? end_ns - start_ns : 0;
        tail.anchor_ns = r.issue_ns;
        break;
      case StartFrom::kUnknown:
        q = gpu::QueryEvent(end);
        if (q != gpu::Query::kDone) break;
        end_ns = host_end();
        if (base_pending) return gpu::Query::kNotReady;
        launch_.untimed().no_start.fetch_add(1, std::memory_order_relaxed);
        tail.anchor_ns = r.issue_ns;
        break;
    }
    if (q == gpu::Query::kNotReady) return q;
  }
  if (timed) Account(p, dur_ns, start_ns);
  if (!one_event_ || q != gpu::Query::kDone) {
    pools.Give(r.end);
    return q;
  }
  pools.Give(tail.end_event);
  tail.end_event = r.end;
  tail.end_ns = end_ns;
  return q;
}

void Poller::Account(const Pending& p, uint64_t ns, uint64_t start) {
  OpClass& c = launch_.classes().at(p.rec.class_id);
  if (!c.hist) c.hist = std::make_unique<Histogram>();
  c.hist->Add(ns);
  c.bytes += p.rec.bytes;
  const bool for_steps = steps_ != nullptr && steps_->wants_gpu();
  if (for_steps) steps_->OnTimed(p.rec, start, ns);
  if (trace_.enabled())
    trace_.Add(TraceEntry{p.rec.class_id, p.rec.stream, p.rec.device, start != 0 ? start : p.rec.issue_ns, ns,
                          p.rec.seq, p.rec.peer});
}

uint32_t Poller::CuptiClass(const CuptiOp& op) {
  OpKey key;
  switch (op.what) {
    case CuptiOp::What::kKernel: {
      auto [it, added] = cupti_kernels_.try_emplace(op.name != nullptr ? op.name : "(unnamed kernel)", 0);
      if (!added) return it->second;
      key.kind = OpKind::kKernel;
      key.func = &it->first;  // map nodes do not move
      key.a = 2;
      it->second = launch_.classes().Intern(key);
      OpClass& c = launch_.classes().at(it->second);
      if (c.name.empty()) c.name = DemangledName(it->first.c_str());
      return it->second;
    }
    case CuptiOp::What::kMemcpy:
      key.kind = OpKind::kMemcpy;
      key.api = op.async ? "cudaMemcpyAsync" : "cudaMemcpy";
      key.a = op.memcpy_kind;
      break;
    case CuptiOp::What::kMemset:
      key.kind = OpKind::kMemcpy;
      key.api = op.async ? "cudaMemsetAsync" : "cudaMemset";
      key.a = -1;
      break;
  }
  return launch_.classes().Intern(key);
}

void Poller::AccountCupti(const CuptiOp& op) {
  const uint32_t id = CuptiClass(op);
  OpClass& c = launch_.classes().at(id);
  c.launches.fetch_add(1, std::memory_order_relaxed);  // a CUPTI-timed op is counted when it completes
  if (!c.hist) c.hist = std::make_unique<Histogram>();
  c.hist->Add(op.dur_ns);
  c.bytes += op.bytes;
  if (steps_ != nullptr && steps_->wants_gpu()) steps_->OnCupti(id, op);
  if (trace_.enabled()) {
    // On the track of the stream's handle, where its ops with event pairs are, not CUPTI's id.
    StreamWatch* watch = cupti::Watch();
    const uint64_t stream = watch != nullptr ? watch->StreamOf(op.context, op.stream, op.stream) : op.stream;
    trace_.Add(TraceEntry{id, stream, static_cast<uint8_t>(op.device), op.start_ns, op.dur_ns, 0, -1});
  }
}

void Poller::WriteReports(bool final) {
  WriteReportFiles(launch_, trace_, final);
  if (final && summaries_ != nullptr) {
    summaries_->OfferSummary(SummaryJson(launch_, true, kAgentSummaryOps));
    summaries_->Flush(200);  // at exit: give the link thread a moment to send it
  }
}

void Poller::Stop() {
  if (stopped_.exchange(true)) return;
  stop_.store(true, std::memory_order_release);
  {
    MutexLock lock(wake_mu_);
    wake_.NotifyAll();
  }
  if (thread_.joinable()) {
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }
  cupti::Flush(true);
  MutexLock lock(mu_);
  DrainQueue();
  CompleteFinished();
  cupti::Drain([](void* self, const CuptiOp& op) { static_cast<Poller*>(self)->AccountCupti(op); }, this);
  if (steps_ != nullptr) steps_->Finish(MonotonicNs());
  WriteReports(true);
}

bool Poller::Snapshot(InflightOps* out, int wait_ms) {
  const uint64_t deadline = MonotonicNs() + static_cast<uint64_t>(wait_ms) * 1000000ull;
  while (!mu_.TryLock()) {
    if (MonotonicNs() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  SnapshotLocked(out);
  mu_.Unlock();
  return true;
}

void Poller::SnapshotLocked(InflightOps* out) {
  DrainQueue();
  const uint64_t now = MonotonicNs();
  const size_t first = out->size();
  for (auto& [key, s] : streams_) {
    int first_index = -1;
    for (Pending& p : s.fifo) {
      // A one-event kernel has started once it is the head: what its stream had before it completed.
      const bool started = p.rec.start == kNoEvent
                               ? first_index < 0
                               : gpu::QueryEvent(launch_.pools().Get(p.rec.start)) == gpu::Query::kDone;
      if (p.started_ns == 0 && started) p.started_ns = now;
      OpClass& c = launch_.classes().at(p.rec.class_id);
      InflightOp op;
      op.name = NameOf(c);
      op.kind = c.key.kind;
      op.stream = p.rec.stream;
      if (p.rec.comm >= 0) {
        Comm& comm = launch_.comms().at(p.rec.comm);
        op.comm = comm.id;
        op.comm_rank = comm.rank;
        op.comm_size = comm.size;
      }
      op.seq = p.rec.seq;
      op.peer = p.rec.peer;
      op.bytes = p.rec.bytes;
      op.running = p.started_ns != 0;
      op.start_derived = p.rec.start == kNoEvent;
      op.in_flight_s = (now - (op.running ? p.started_ns : p.rec.issue_ns)) / 1e9;
      // Everything behind the stream's head waits for the head (a stream runs in order).
      if (first_index >= 0) op.blocked_by = first_index;
      out->push_back(std::move(op));
      if (first_index < 0) first_index = static_cast<int>(out->size()) - 1;
    }
  }
  if (StreamWatch* watch = cupti::Watch()) AddStalledStreams(*watch, first, out);
}

void Poller::AddStalledStreams(StreamWatch& watch, size_t first, InflightOps* out) {
  InflightOps stalled;
  watch.AppendInflight(&stalled);
  const size_t paired = out->size();
  for (InflightOp& s : stalled) {
    // An op with an event pair running on that stream says more (its name, comm, seq): keep it.
    auto on_stream = [&](const InflightOp& o) { return o.stream == s.stream && !o.last_on_stream; };
    if (std::any_of(out->begin() + first, out->begin() + paired,
                    [&](const InflightOp& o) { return on_stream(o) && o.running; }))
      continue;
    out->push_back(std::move(s));
    // Paired ops queued on it have not started: they wait behind what the stream runs.
    for (size_t i = first; i < paired; ++i)
      if (on_stream((*out)[i]) && (*out)[i].blocked_by < 0) (*out)[i].blocked_by = static_cast<int>(out->size()) - 1;
  }
}

}  // namespace xtimer
