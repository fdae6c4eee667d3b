#include "preload/timing/report_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "common/atomic_file.h"
#include "common/clock.h"
#include "common/identity.h"
#include "common/json_writer.h"
#include "common/log.h"
#include "preload/timing/cupti_backend.h"
#include "preload/timing/launch_path.h"
#include "preload/timing/op_names.h"

namespace xtimer {
namespace {

void WriteRankHeader(JsonWriter& w, LaunchPath& t, const char* format) {
  RankInfo r = t.rank_info();
  w.Field("format", format).Field("version", 1);
  w.Field("rank", r.rank).Field("world_size", r.world_size).Field("local_rank", r.local_rank);
  w.Field("host", HostName()).Field("pid", static_cast<int>(getpid()));
  w.Field("time", IsoUtc(WallNs()));
}

void WriteOp(JsonWriter& w, LaunchPath& t, OpClass& c) {
  const Histogram& h = *c.hist;
  const OpKey& k = c.key;
  const double total_s = h.sum_ns() / 1e9;
  w.BeginObject();
  w.Field("name", NameOf(c)).Field("kind", Name(k.kind));
  w.Field("count", static_cast<unsigned long long>(h.count()));
  w.Field("launches", static_cast<unsigned long long>(c.launches.load(std::memory_order_relaxed)));
  w.Field("mean_us", h.mean_ns() / 1e3).Field("p50_us", h.Quantile(0.5) / 1e3);
  w.Field("p99_us", h.Quantile(0.99) / 1e3).Field("max_us", h.max_ns() / 1e3);
  w.Field("min_us", h.min_ns() / 1e3).Field("total_ms", h.sum_ns() / 1e6);
  switch (k.kind) {
    case OpKind::kMatmul: {
      double flops = 2.0 * k.a * k.b * k.c * k.d;
      w.Field("m", static_cast<long long>(k.a)).Field("n", static_cast<long long>(k.b));
      w.Field("k", static_cast<long long>(k.c)).Field("batch", static_cast<long long>(k.d));
      if (total_s > 0) w.Field("tflops", flops * h.count() / total_s / 1e12);
      break;
    }
    case OpKind::kCollective:
    case OpKind::kP2p: {
      int slot = static_cast<int>(k.c);
      int nranks = 1;
      if (slot >= 0) {
        Comm& comm = t.comms().at(slot);
        nranks = comm.size;
        w.Field("comm", comm.id).Field("comm_size", nranks);
      }
      w.Field("bytes", static_cast<long long>(k.a)).Field("dtype", NcclTypeName(static_cast<int>(k.b)));
      if (k.d > 1) w.Field("group_size", static_cast<long long>(k.d));
      if (total_s > 0) {
        double algbw = c.bytes / total_s / 1e9;
        w.Field("algbw_gbps", algbw).Field("busbw_gbps", algbw * BusBandwidthFactor(k.api, nranks));
      }
      break;
    }
    case OpKind::kMemcpy:
      w.Field("bytes_total", static_cast<unsigned long long>(c.bytes));
      if (total_s > 0) w.Field("gbps", c.bytes / total_s / 1e9);
      break;
    default: break;
  }
  w.EndObject();
}

}  // namespace

std::string SummaryJson(LaunchPath& t, bool final, size_t max_ops) {
  JsonWriter w;
  w.BeginObject();
  WriteRankHeader(w, t, "xtimer-summary");
  w.Field("final", final);
  w.Field("timing_mode", t.cupti() ? "cupti" : "event_pairs");
  if (!t.cupti()) w.Field("timing_note", t.timing_note());
  // Busiest classes first.
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < t.classes().size(); ++i)
    if (t.classes().Ready(i) && t.classes().at(i).hist) ids.push_back(i);
  std::sort(ids.begin(), ids.end(), [&](uint32_t a, uint32_t b) {
    return t.classes().at(a).hist->sum_ns() > t.classes().at(b).hist->sum_ns();
  });
  if (ids.size() > max_ops) ids.resize(max_ops);
  w.Key("ops").BeginArray();
  for (uint32_t id : ids) WriteOp(w, t, t.classes().at(id));
  w.EndArray();
  UntimedCounters& u = t.untimed();
  w.Key("untimed").BeginObject();
  w.Field("sampled_out", static_cast<unsigned long long>(u.sampled_out.load()));
  w.Field("no_event", static_cast<unsigned long long>(u.no_event.load()));
  w.Field("record_failed", static_cast<unsigned long long>(u.record_failed.load()));
  w.Field("queue_full", static_cast<unsigned long long>(u.queue_full.load()));
  w.Field("no_start", static_cast<unsigned long long>(u.no_start.load()));
  if (t.cupti()) w.Field("cupti_dropped", static_cast<unsigned long long>(cupti::Dropped()));
  w.EndObject();
  w.EndObject();
  return w.Take();
}

std::string TraceJson(LaunchPath& t, const std::vector<TraceEntry>& entries) {
  RankInfo r = t.rank_info();
  // One track (tid) per stream, numbered in order of appearance, named in metadata events.
  std::map<std::pair<int, uint64_t>, int> tracks;
  JsonWriter w;
  w.BeginObject().Key("traceEvents").BeginArray();
  w.BeginObject().Field("name", "process_name").Field("ph", "M").Field("pid", r.rank);
  w.Key("args").BeginObject().Field("name", "rank " + std::to_string(r.rank)).EndObject().EndObject();
  for (const TraceEntry& e : entries) {
    auto key = std::make_pair(static_cast<int>(e.device), e.stream);
    auto [it, added] = tracks.emplace(key, static_cast<int>(tracks.size()) + 1);
    if (added) {
      char label[64];
      std::snprintf(label, sizeof label, "gpu %d stream 0x%llx", e.device, static_cast<unsigned long long>(e.stream));
      w.BeginObject().Field("name", "thread_name").Field("ph", "M").Field("pid", r.rank).Field("tid", it->second);
      w.Key("args").BeginObject().Field("name", label).EndObject().EndObject();
    }
    OpClass& c = t.classes().at(e.class_id);
    w.BeginObject();
    w.Field("name", NameOf(c)).Field("cat", Name(c.key.kind)).Field("ph", "X");
    // Microseconds of CLOCK_MONOTONIC to the ns: %g's six digits would round ts to 0.1 s.
    w.Key("ts").Fixed(e.start_ns / 1e3, 3);
    w.Key("dur").Fixed(e.dur_ns / 1e3, 3);
    w.Field("pid", r.rank).Field("tid", it->second);
    if (e.seq != 0 || e.peer >= 0) {
      w.Key("args").BeginObject();
      if (e.seq != 0) w.Field("seq", static_cast<unsigned long long>(e.seq));
      if (e.peer >= 0) w.Field("peer", e.peer);
      w.EndObject();
    }
    w.EndObject();
  }
  w.EndArray().Field("displayTimeUnit", "ms").EndObject();
  return w.Take();
}

std::string RankFilePath(LaunchPath& t, const char* suffix) {
  RankInfo r = t.rank_info();
  char name[64];
  std::snprintf(name, sizeof name, "/%05d-%05d.%s", r.rank, r.world_size, suffix);
  return t.config().timeline_path + name;
}

void WriteReportFiles(LaunchPath& t, const TraceBuffer& trace, bool final) {
  static bool reported_failure = false;  // one line, not one per interval
  // The rank can change once (RANK unset, then learned from the first NCCL communicator):
  // files written under the earlier name are removed so every rank has one summary.
  // Never destroyed: the final report is written from an exit handler, after static destructors
  // registered later (at the first periodic report) have run.
  static std::string& last_summary = *new std::string;
  static std::string& last_trace = *new std::string;
  std::string summary = RankFilePath(t, "summary.json"), trace_path = RankFilePath(t, "trace.json");
  std::string error;
  bool ok = MakeDirs(t.config().timeline_path, &error) && WriteFileAtomically(summary, SummaryJson(t, final), &error);
  if (ok && trace.enabled()) ok = WriteFileAtomically(trace_path, TraceJson(t, trace.Entries()), &error);
  if (ok && !last_summary.empty() && last_summary != summary) {
    unlink(last_summary.c_str());
    unlink(last_trace.c_str());
  }
  if (ok) {
    last_summary = summary;
    last_trace = trace_path;
  }
  if (!ok && !reported_failure) {
    Log(LogLevel::kWarn, "cannot write reports (%s); set XTIMER_TIMELINE_PATH to a writable folder", error.c_str());
    reported_failure = true;
  }
  if (ok && final) Log(LogLevel::kDebug, "wrote %s", RankFilePath(t, "summary.json").c_str());
}

}  // namespace xtimer
