#include "preload/step_signals.h"

#include <fcntl.h>
#include <library_types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/atomic_file.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/json_writer.h"
#include "common/log.h"
#include "preload/agent_link.h"
#include "preload/op_names.h"
#include "preload/python_hooks.h"
#include "preload/report_writer.h"
#include "preload/tracker.h"

namespace xtimer {
namespace {

// CUPTI hands its records over at most every 100 ms: a step is closed once everything issued
// before its end has completed and this long has passed since.
constexpr uint64_t kGraceNs = 300'000'000;
constexpr uint64_t kFrontierEveryNs = 10'000'000;
constexpr size_t kMaxKernels = 8;
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

StepSignals::StepSignals(Tracker& tracker)
    : tracker_(tracker), node_(env::String("XTIMER_NODE_NAME")), wall_minus_mono_ns_(WallMinusMono()) {
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
  if (tracker_.classes().at(rec.class_id).key.kind != OpKind::kCollective) return;
  uint64_t step = 0;
  if (detector_.Feed(rec.class_id, rec.issue_ns, rec.seq, rec.comm, &step)) book_.Begin(step, rec.issue_ns);
}

void StepSignals::OnTimed(const OpRecord& rec, uint64_t start_ns, uint64_t dur_ns) {
  const OpKind kind = tracker_.classes().at(rec.class_id).key.kind;
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
  book_.AddIssueLatency(rec.issue_ns, start_ns);
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
  while (book_.TakeFinished(delayed_frontier_ns_, &f)) ready_ += RecordJson(f, wall_minus_mono) + "\n";
}

void StepSignals::Publish(uint64_t now_ns) {
  std::string frames;
  if (sampler_.SampleIfDue(now_ns, &frames)) samples_.emplace_back(now_ns, std::move(frames));
  if (ready_.empty()) return;
  Write(ready_);
  tracker_.agent().OfferSteps(ready_);
  ready_.clear();
}

void StepSignals::Finish(uint64_t now_ns) {
  python::Span span;
  while (python::Pop(&span)) book_.AddSpan(static_cast<SpanKind>(span.kind), span.begin_ns, span.end_ns);
  const int64_t wall_minus_mono = WallOffset();
  StepFacts f;
  while (book_.TakeEnded(&f)) ready_ += RecordJson(f, wall_minus_mono) + "\n";
  Publish(now_ns);
}

std::string StepSignals::RecordJson(const StepFacts& f, int64_t wall_minus_mono_ns) {
  auto wall = [&](uint64_t mono_ns) {
    return static_cast<double>(static_cast<int64_t>(mono_ns) + wall_minus_mono_ns) / 1e9;
  };
  const RankInfo r = tracker_.rank_info();
  const double len_s = static_cast<double>(f.end_ns - f.begin_ns) / 1e9;
  const double busy_s = static_cast<double>(f.busy_ns) / 1e9;
  JsonWriter w;
  w.BeginObject().Field("v", 1).Field("rank", r.rank).Field("world", r.world_size).Field("node", node_);
  w.Field("pid", static_cast<int>(getpid())).Field("step", static_cast<unsigned long long>(f.step));
  w.Key("t_begin").Fixed(wall(f.begin_ns), 6).Key("t_end").Fixed(wall(f.end_ns), 6);
  w.Field("gpu_busy_s", busy_s).Field("gpu_idle_s", std::max(0.0, len_s - busy_s));
  w.Key("issue_latency_s");
  if (f.issue_latency_ns >= 0) {
    w.Double(static_cast<double>(f.issue_latency_ns) / 1e9);
  } else {
    w.Null();
  }

  // Kernels and GEMMs by total time, NCCL's own kernels left out (their time is mostly waiting).
  std::vector<std::pair<uint32_t, StepKernel>> ks(f.kernels.begin(), f.kernels.end());
  std::sort(ks.begin(), ks.end(), [](const auto& a, const auto& b) {
    return a.second.ns != b.second.ns ? a.second.ns > b.second.ns : a.first < b.first;
  });
  w.Key("kernels").BeginArray();
  size_t written = 0;
  for (const auto& [id, k] : ks) {
    if (written == kMaxKernels) break;
    OpClass& c = tracker_.classes().at(id);
    const OpKey& key = c.key;
    std::string sig;
    double tflops = 0;
    const double s = static_cast<double>(k.ns) / 1e9;
    if (key.kind == OpKind::kMatmul) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "GEMM %s %lldx%lldx%lld", BlasTypeName(key.e), static_cast<long long>(key.a),
                    static_cast<long long>(key.b), static_cast<long long>(key.c));
      sig = buf;
      if (key.d > 1) sig += " x" + std::to_string(key.d);
      if (s > 0) tflops = 2.0 * key.a * key.b * key.c * std::max<int64_t>(key.d, 1) * k.n / s / 1e12;
    } else {
      sig = NameOf(c);
      if (IsNcclKernel(sig)) continue;
      if (sig.size() > kMaxSigChars) sig.resize(kMaxSigChars);
    }
    w.BeginObject().Field("sig", sig).Field("n", static_cast<unsigned long long>(k.n)).Field("s", s);
    w.Field("tflops", tflops).EndObject();
    ++written;
  }
  w.EndArray();

  w.Key("colls").BeginArray();
  for (const StepColl& c : f.colls) {
    OpClass& cls = tracker_.classes().at(c.class_id);
    const char* api = cls.key.api != nullptr ? cls.key.api : "?";
    if (std::strncmp(api, "nccl", 4) == 0) api += 4;
    w.BeginObject();
    if (c.comm >= 0) {
      Comm& comm = tracker_.comms().at(c.comm);
      w.Field("comm", comm.id).Field("seq", static_cast<unsigned long long>(c.seq)).Field("op", api);
      w.Field("bytes", static_cast<long long>(cls.key.a)).Field("ranks", comm.size);
    } else {
      w.Field("comm", "").Field("seq", static_cast<unsigned long long>(c.seq)).Field("op", api);
      w.Field("bytes", static_cast<long long>(cls.key.a)).Field("ranks", 0);
    }
    w.Key("call").Fixed(wall(c.call_ns), 6);
    w.Key("start");
    c.start_ns != 0 ? w.Fixed(wall(c.start_ns), 6) : w.Null();
    w.Key("end");
    c.end_ns != 0 ? w.Fixed(wall(c.end_ns), 6) : w.Null();
    w.EndObject();
  }
  w.EndArray();
  w.Field("gc_s", static_cast<double>(f.gc_ns) / 1e9).Field("data_s", static_cast<double>(f.data_ns) / 1e9);
  if (!f.samples.empty()) {
    w.Key("samples").BeginArray();
    for (const auto& [frames, n] : f.samples)
      w.BeginObject().Field("frames", frames).Field("n", static_cast<unsigned>(n)).EndObject();
    w.EndArray();
  }
  return w.EndObject().Take();
}

void StepSignals::Write(const std::string& lines) {
  if (file_failed_) return;
  if (fd_ < 0) {
    std::string error;
    file_ = RankFilePath(tracker_, "steps.jsonl");
    if (MakeDirs(tracker_.config().timeline_path, &error))
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
