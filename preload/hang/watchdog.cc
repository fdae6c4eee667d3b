#include "preload/hang/watchdog.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/clock.h"
#include "common/log.h"
#include "preload/base/internal_thread.h"
#include "preload/hang/blocked_threads.h"
#include "preload/timing/poller.h"

namespace xtimer {
namespace {

// How long the dumper may wait for the poller's in-flight list.
constexpr int kSnapshotWaitMs = 200;

// Seconds from `then` to `now`; 0 when `then` is later (a thread entered its call, or the poller
// beat, after `now` was read: unsigned subtraction would make that 584 years).
double SecondsSince(uint64_t now, uint64_t then) { return then >= now ? 0.0 : (now - then) / 1e9; }

std::string Describe(const InflightOp& op) {
  char buf[512];
  if (!op.comm.empty() && op.kind == OpKind::kCollective) {
    std::snprintf(buf, sizeof buf, "%s #%llu on comm %s", op.name.c_str(), static_cast<unsigned long long>(op.seq),
                  op.comm.c_str());
  } else if (!op.comm.empty()) {
    std::snprintf(buf, sizeof buf, "%s #%llu with peer %d on comm %s", op.name.c_str(),
                  static_cast<unsigned long long>(op.seq), op.peer, op.comm.c_str());
  } else {
    std::snprintf(buf, sizeof buf, "%s (%s)", op.name.c_str(), Name(op.kind));
  }
  return buf;
}

}  // namespace

Watchdog::Watchdog(Settings settings, Poller& poller, std::function<RankInfo()> rank_info, HangSink* hang_sink)
    : settings_(std::move(settings)), poller_(poller), rank_info_(std::move(rank_info)), hang_sink_(hang_sink) {}

void Watchdog::Start(bool agent_symbolizes) {
  capture::DumperOptions options;
  // With a node agent the agent symbolises (docs/design.md, "Capture": interpretation outside the process).
  if (agent_symbolizes) options.symbolizer = "none";
  capture::Dumper::Instance().Start(this, options);
  thread_ = StartInternalThread("xtimer-watchdog", [this] { Loop(); });
  thread_.detach();  // runs until the process ends; holds no lock across a check
}

RankInfo Watchdog::GetRankInfo() { return rank_info_(); }

InflightOps Watchdog::GetInflightOps() {
  InflightOps ops;
  if (!poller_.Snapshot(&ops, kSnapshotWaitMs))
    Log(LogLevel::kWarn, "the poller is busy inside a CUDA call: in-flight GPU ops are missing from this dump");
  const uint64_t now = MonotonicNs();
  for (const BlockedCall& b : BlockedThreads::Snapshot()) {
    InflightOp op;
    op.name = b.what;
    op.kind = b.kind;
    op.running = true;
    op.in_flight_s = SecondsSince(now, b.since_ns);
    op.peer = -1;
    ops.push_back(op);
  }
  return ops;
}

std::string Watchdog::Trigger() {
  MutexLock lock(trigger_mu_);
  return trigger_;
}

std::string Watchdog::FindHang() {
  const double timeout = settings_.hang_timeout_s;
  const uint64_t now = MonotonicNs();
  char buf[768];

  InflightOps ops;
  const InflightOp* oldest = nullptr;  // the longest-running op on the GPU, hung or not
  if (poller_.Snapshot(&ops, kSnapshotWaitMs)) {
    for (const InflightOp& op : ops)
      if (op.running && (oldest == nullptr || op.in_flight_s > oldest->in_flight_s)) oldest = &op;
    // The op named hung: the longest-running one past the timeout, one seen to start (its start
    // event) before a one-event kernel, which may be waiting for another stream's op instead. A
    // stalled stream (CUPTI mode) whose collective has not even started waits for another stream
    // (NCCL's stream waits on an event of the compute stream): that other stream comes first.
    auto waits_elsewhere = [&](const InflightOp& op) {
      return op.last_on_stream && std::any_of(ops.begin(), ops.end(), [&](const InflightOp& o) {
               return !o.running && o.stream == op.stream && (o.kind == OpKind::kCollective || o.kind == OpKind::kP2p);
             });
    };
    const InflightOp* hung = nullptr;
    for (const InflightOp& op : ops) {
      if (!op.running || op.in_flight_s < timeout) continue;
      const int rank_op = (op.start_derived ? 1 : 0) + (waits_elsewhere(op) ? 2 : 0);
      const int rank_hung = hung == nullptr ? 4 : (hung->start_derived ? 1 : 0) + (waits_elsewhere(*hung) ? 2 : 0);
      if (rank_op < rank_hung || (rank_op == rank_hung && op.in_flight_s > hung->in_flight_s)) hung = &op;
    }
    if (hung != nullptr) {
      int index = static_cast<int>(hung - ops.data());
      int behind = static_cast<int>(
          std::count_if(ops.begin(), ops.end(), [&](const InflightOp& o) { return o.blocked_by == index; }));
      if (hung->last_on_stream) {
        // CUPTI mode: the stream is known to be stuck, not which of its ops runs, nor how many
        // plain kernels are queued on it (only ops with event pairs are counted behind it).
        int n = hung->head_of_stream
                    ? std::snprintf(buf, sizeof buf,
                                    "stream 0x%llx has made no progress for %.1f s (timeout %g s); waiting at: %s",
                                    static_cast<unsigned long long>(hung->stream), hung->in_flight_s, timeout,
                                    Describe(*hung).c_str())
                    : std::snprintf(
                          buf, sizeof buf,
                          "stream 0x%llx has made no progress for %.1f s (timeout %g s); last launched on it %.1f s "
                          "ago: %s",
                          static_cast<unsigned long long>(hung->stream), hung->in_flight_s, timeout,
                          hung->since_launch_s, Describe(*hung).c_str());
        if (behind > 0 && n > 0 && static_cast<size_t>(n) < sizeof buf)
          std::snprintf(buf + n, sizeof buf - n, "; %d op(s) waiting behind it", behind);
      } else {
        std::snprintf(
            buf, sizeof buf, "%s running for %.1f s on stream 0x%llx (timeout %g s); %d op(s) waiting behind it",
            Describe(*hung).c_str(), hung->in_flight_s, static_cast<unsigned long long>(hung->stream), timeout, behind);
      }
      return buf;
    }
  } else if (uint64_t beat = poller_.heartbeat_ns(); beat != 0 && SecondsSince(now, beat) >= timeout) {
    std::snprintf(buf, sizeof buf, "the CUDA driver has not answered an event query for %.1f s (timeout %g s)",
                  SecondsSince(now, beat), timeout);
    return buf;
  }

  for (const BlockedCall& b : BlockedThreads::Snapshot()) {
    double s = SecondsSince(now, b.since_ns);
    if (s >= timeout) {
      // A thread waits on the GPU; the op the GPU is running is what it waits for (the op's own
      // age, counted from when it started on the GPU, can lag the wait by a poll period).
      const bool setup = b.kind == OpKind::kCommInit;
      int n =
          std::snprintf(buf, sizeof buf, "thread %d blocked in %s%s for %.1f s (timeout %g s)", static_cast<int>(b.tid),
                        b.what, setup ? " (communicator set-up: waiting for the other ranks)" : "", s, timeout);
      if (oldest != nullptr && n > 0 && static_cast<size_t>(n) < sizeof buf) {
        if (oldest->last_on_stream)
          std::snprintf(buf + n, sizeof buf - n, "; stream 0x%llx has made no progress for %.1f s (%s: %s)",
                        static_cast<unsigned long long>(oldest->stream), oldest->in_flight_s,
                        oldest->head_of_stream ? "waiting at" : "last launched", Describe(*oldest).c_str());
        else
          std::snprintf(buf + n, sizeof buf - n, "; the GPU is running %s (for %.1f s)", Describe(*oldest).c_str(),
                        oldest->in_flight_s);
      }
      return buf;
    }
  }
  return {};
}

void Watchdog::Loop() {
  const double timeout = settings_.hang_timeout_s;
  const double period = std::clamp(timeout / 10, 0.01, 0.5);
  for (;;) {
    std::this_thread::sleep_for(std::chrono::duration<double>(period));
    std::string what = FindHang();
    if (what.empty()) {
      if (hang_reported_ && hang_sink_ != nullptr) hang_sink_->SetHang(false, "");
      hang_reported_ = false;  // the hang (if any) resolved: a new one is reported again
      continue;
    }
    if (hang_reported_) continue;
    hang_reported_ = true;
    Act(what);
  }
}

void Watchdog::Act(const std::string& what) {
  {
    MutexLock lock(trigger_mu_);
    trigger_ = what;
  }
  if (hang_sink_ != nullptr) hang_sink_->SetHang(true, what);
  const Settings& config = settings_;
  RankInfo r = rank_info_();
  switch (config.hang_action) {
    case HangAction::kLog: Log(LogLevel::kError, "hang on rank %d: %s", r.rank, what.c_str()); break;
    case HangAction::kDump:
      Log(LogLevel::kError, "hang on rank %d: %s; writing stacks to %s", r.rank, what.c_str(),
          config.timeline_path.c_str());
      capture::Dumper::Instance().RequestDump(capture::Reason::kHang);
      break;
    case HangAction::kAbort:
      Log(LogLevel::kError, "hang on rank %d: %s; writing stacks, then aborting (XTIMER_HANG_ACTION=abort)", r.rank,
          what.c_str());
      capture::Dumper::Instance().DumpAndWait(capture::Reason::kHang, 30);
      poller_.Stop();  // final summary, then let the launcher restart us
      std::abort();
  }
}

}  // namespace xtimer
