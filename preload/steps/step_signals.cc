#include "preload/steps/step_signals.h"

#include <fcntl.h>
#include <library_types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "common/atomic_file.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/log.h"
#include "common/steps/step_file_writer.h"
#include "preload/steps/python_hooks.h"
#include "preload/timing/event_pool.h"
#include "preload/timing/launch_path.h"
#include "preload/timing/op_names.h"
#include "preload/timing/report_writer.h"

namespace xtimer {
namespace {

// CUPTI hands its records over at most every 100 ms: a step is closed once everything issued
// before its end has completed and this long has passed since.
constexpr uint64_t kGraceNs = 300'000'000;
constexpr uint64_t kFrontierEveryNs = 10'000'000;
constexpr size_t kMaxKernels = 8;
constexpr const char* kOtherKernels = "(other kernels)";
constexpr size_t kMaxSigChars = 160;

const char* BlasTypeName(int64_t t) {
  switch (t) {
    case CUDA_R_16BF: return "bf16";
    case CUDA_R_16F: return "f16";
    case CUDA_R_32F: return "f32";
    case CUDA_R_64F: return "f64";
    case CUDA_R_8I: return "i8";
    case CUDA_R_32I: return "i32";
    case CUDA_R_8F_E4M3: return "e4m3";
    case CUDA_R_8F_E5M2: return "e5m2";
    case CUDA_C_32F: return "c32";
    case CUDA_C_64F: return "c64";
    default: return "?";
  }
}

bool IsNcclKernel(const std::string& name) { return name.rfind("nccl", 0) == 0; }

}  // namespace

namespace {

// CLOCK_REALTIME minus CLOCK_MONOTONIC now.
int64_t WallMinusMono() {
  const uint64_t a = MonotonicNs(), wall = WallNs(), b = MonotonicNs();
  return static_cast<int64_t>(wall) - static_cast<int64_t>(a + (b - a) / 2);
}

}  // namespace

StepSignals::StepSignals(LaunchPath& launch, StepRecordSink* out)
    : launch_(launch), out_(out), node_(env::String("XTIMER_NODE_NAME")), wall_minus_mono_ns_(WallMinusMono()) {
  if (node_.empty()) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    node_ = host;
  }
}

int64_t StepSignals::WallOffset() {
  // Kept while it holds to a millisecond, so a boundary reads the same in the step that ends
  // there and in the next; an NTP step or slew beyond that is followed.
  const int64_t now = WallMinusMono();
  if (now - wall_minus_mono_ns_ > 1000000 || wall_minus_mono_ns_ - now > 1000000) wall_minus_mono_ns_ = now;
  return wall_minus_mono_ns_;
}

void StepSignals::OnIssued(const OpRecord& rec) {
  if (launch_.classes().at(rec.class_id).key.kind != OpKind::kCollective) return;
  uint64_t step = 0;
  if (detector_.Feed(rec.class_id, rec.issue_ns, rec.seq, rec.comm, &step)) book_.Begin(step, rec.issue_ns);
}

void StepSignals::OnTimed(const OpRecord& rec, uint64_t start_ns, uint64_t dur_ns) {
  const OpKind kind = launch_.classes().at(rec.class_id).key.kind;
  if (kind == OpKind::kCollective) {
    StepColl c;
    c.comm = rec.comm;
    c.seq = rec.seq;
    c.class_id = rec.class_id;
    c.call_ns = rec.issue_ns;
    c.start_ns = start_ns;
    c.end_ns = start_ns != 0 ? start_ns + dur_ns : 0;
    book_.AddColl(c);
  }
  if (start_ns == 0) return;
  book_.AddInterval(start_ns, start_ns + dur_ns);
  // A plain kernel timed by its end event alone has a derived start (the previous op's end or
  // its own call): GPU start minus call would be queueing, not issue latency.
  if (rec.start != kNoEvent) book_.AddIssueLatency(rec.issue_ns, start_ns);
  if (kind == OpKind::kKernel || kind == OpKind::kMatmul) book_.AddKernel(rec.class_id, start_ns, dur_ns);
}

void StepSignals::OnCupti(uint32_t class_id, const CuptiOp& op) {
  book_.AddInterval(op.start_ns, op.start_ns + op.dur_ns);
  if (op.what == CuptiOp::What::kKernel) book_.AddKernel(class_id, op.start_ns, op.dur_ns);
}

void StepSignals::Collect(uint64_t now_ns, uint64_t oldest_pending_ns) {
  python::Span span;
  while (python::Pop(&span)) book_.AddSpan(static_cast<SpanKind>(span.kind), span.begin_ns, span.end_ns);
  for (const auto& [t, frames] : samples_) book_.AddSample(t, frames);
  samples_.clear();

  // Everything issued before `frontier` has completed; records of it have all arrived once
  // kGraceNs has passed since.
  const uint64_t frontier = std::min(now_ns, oldest_pending_ns);
  if (frontier_.empty() || now_ns - frontier_.back().first >= kFrontierEveryNs) {
    frontier_.emplace_back(now_ns, std::max(frontier, frontier_.empty() ? 0 : frontier_.back().second));
  }
  size_t used = 0;
  while (used < frontier_.size() && frontier_[used].first + kGraceNs <= now_ns) {
    delayed_frontier_ns_ = frontier_[used].second;
    ++used;
  }
  frontier_.erase(frontier_.begin(), frontier_.begin() + static_cast<ptrdiff_t>(used));

  if (!book_.open()) return;
  const int64_t wall_minus_mono = WallOffset();
  StepFacts f;
  while (book_.TakeFinished(delayed_frontier_ns_, &f)) closed_.push_back(Record(f, wall_minus_mono));
}

void StepSignals::Publish(uint64_t now_ns) {
  std::string frames;
  if (sampler_.SampleIfDue(now_ns, &frames)) samples_.emplace_back(now_ns, std::move(frames));
  if (closed_.empty()) return;
  // The agent's lines (layout 1) and the file's (layout 2), made outside the poller's lock.
  std::string agent_lines, file_lines;
  for (const slowdown::StepRecord& r : closed_) {
    agent_lines += slowdown::StepRecordV1Json(r);
    agent_lines += '\n';
    lines_.Append(r, &file_lines);
  }
  closed_.clear();
  Write(file_lines);
  if (out_ != nullptr) out_->OfferSteps(agent_lines);
}

void StepSignals::Finish(uint64_t now_ns) {
  python::Span span;
  while (python::Pop(&span)) book_.AddSpan(static_cast<SpanKind>(span.kind), span.begin_ns, span.end_ns);
  const int64_t wall_minus_mono = WallOffset();
  StepFacts f;
  while (book_.TakeEnded(&f)) closed_.push_back(Record(f, wall_minus_mono));
  Publish(now_ns);
}

slowdown::StepRecord StepSignals::Record(const StepFacts& f, int64_t wall_minus_mono_ns) {
  // Host times to the microsecond, as both layouts write them (so that the agent's records and
  // the file's read alike).
  auto wall = [&](uint64_t mono_ns) {
    const int64_t ns = static_cast<int64_t>(mono_ns) + wall_minus_mono_ns;
    return static_cast<double>((ns + 500) / 1000) / 1e6;
  };
  constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();
  const RankInfo info = launch_.rank_info();
  slowdown::StepRecord r;
  r.rank = info.rank;
  r.world = info.world_size;
  r.node = node_;
  r.pid = getpid();
  r.step = static_cast<int64_t>(f.step);
  r.t_begin = wall(f.begin_ns);
  r.t_end = wall(f.end_ns);
  r.gpu_busy_s = static_cast<double>(f.busy_ns) / 1e9;
  r.gpu_idle_s = std::max(0.0, (r.t_end - r.t_begin) - r.gpu_busy_s);  // as the file's reader derives it
  r.issue_latency_s = f.issue_latency_ns >= 0 ? static_cast<double>(f.issue_latency_ns) / 1e9 : kUnknown;

  // Kernels and GEMMs by total time, NCCL's own kernels left out (their time is mostly waiting).
  std::vector<std::pair<uint32_t, StepKernel>> ks(f.kernels.begin(), f.kernels.end());
  std::sort(ks.begin(), ks.end(), [](const auto& a, const auto& b) {
    return a.second.ns != b.second.ns ? a.second.ns > b.second.ns : a.first < b.first;
  });
  // The rest go into one entry, so that the record's kernel time is the step's whole kernel time:
  // a slow GPU is slow in every kernel, and a real model's eight longest kernels may be far from
  // all of its time (a small GPT in PyTorch runs some 40 kernel and GEMM classes a step).
  slowdown::KernelTime rest;
  rest.sig = kOtherKernels;
  for (const auto& [id, k] : ks) {
    OpClass& c = launch_.classes().at(id);
    if (r.kernels.size() == kMaxKernels) {
      if (c.key.kind == OpKind::kMatmul || !IsNcclKernel(NameOf(c))) {
        rest.n += static_cast<uint32_t>(k.n);
        rest.s += static_cast<double>(k.ns) / 1e9;
      }
      continue;
    }
    const OpKey& key = c.key;
    slowdown::KernelTime out;
    out.n = static_cast<uint32_t>(k.n);
    out.s = static_cast<double>(k.ns) / 1e9;
    if (key.kind == OpKind::kMatmul) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "GEMM %s %lldx%lldx%lld", BlasTypeName(key.e), static_cast<long long>(key.a),
                    static_cast<long long>(key.b), static_cast<long long>(key.c));
      out.sig = buf;
      if (key.d > 1) out.sig += " x" + std::to_string(key.d);
      if (out.s > 0) out.tflops = 2.0 * key.a * key.b * key.c * std::max<int64_t>(key.d, 1) * k.n / out.s / 1e12;
    } else {
      out.sig = NameOf(c);
      if (IsNcclKernel(out.sig)) continue;
      if (out.sig.size() > kMaxSigChars) out.sig.resize(kMaxSigChars);
    }
    r.kernels.push_back(std::move(out));
  }
  if (rest.n > 0) r.kernels.push_back(std::move(rest));

  for (const StepColl& c : f.colls) {
    OpClass& cls = launch_.classes().at(c.class_id);
    const char* api = cls.key.api != nullptr ? cls.key.api : "?";
    if (std::strncmp(api, "nccl", 4) == 0) api += 4;
    slowdown::CollTime out;
    if (c.comm >= 0) {
      Comm& comm = launch_.comms().at(c.comm);
      out.comm = comm.id;
      out.ranks = comm.size;
    }
    out.seq = static_cast<int64_t>(c.seq);
    out.op = api;
    out.bytes = static_cast<uint64_t>(cls.key.a);
    out.call = wall(c.call_ns);
    out.start = c.start_ns != 0 ? wall(c.start_ns) : kUnknown;
    out.end = c.end_ns != 0 ? wall(c.end_ns) : kUnknown;
    r.colls.push_back(std::move(out));
  }
  r.gc_s = static_cast<double>(f.gc_ns) / 1e9;
  r.data_s = static_cast<double>(f.data_ns) / 1e9;
  for (const auto& [frames, n] : f.samples) r.samples.push_back({frames, static_cast<uint32_t>(n)});
  return r;
}

void StepSignals::Write(const std::string& lines) {
  if (file_failed_) return;
  if (fd_ < 0) {
    std::string error;
    file_ = RankFilePath(launch_, "steps.jsonl");
    if (MakeDirs(launch_.config().timeline_path, &error))
      fd_ = ::open(file_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      if (error.empty()) error = file_ + ": " + std::strerror(errno);
      Log(LogLevel::kWarn, "cannot write step records (%s); set XTIMER_TIMELINE_PATH to a writable folder",
          error.c_str());
      file_failed_ = true;
      return;
    }
  }
  size_t done = 0;
  while (done < lines.size()) {
    ssize_t n = write(fd_, lines.data() + done, lines.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Log(LogLevel::kWarn, "cannot append to %s (%s); step records go to the agent only", file_.c_str(),
          std::strerror(errno));
      close(fd_);
      fd_ = -1;
      file_failed_ = true;
      return;
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace xtimer
