#include "preload/capture/stack_dump.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "common/atomic_file.h"
#include "common/json_writer.h"

namespace xtimer::capture {
namespace {

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

void WritePythonFrames(JsonWriter& w, const std::vector<PythonFrame>& frames) {
  w.BeginArray();
  for (const PythonFrame& f : frames) {
    w.BeginObject().Field("function", f.function).Field("file", f.file);
    if (f.line >= 0) {
      w.Field("line", f.line);
    } else {
      w.Key("line").Null();
    }
    w.EndObject();
  }
  w.EndArray();
}

void WriteOp(JsonWriter& w, const InflightOp& op) {
  w.BeginObject().Field("name", op.name).Field("kind", Name(op.kind)).Field("stream", Hex(op.stream));
  if (!op.comm.empty()) w.Field("comm", op.comm);
  if (op.comm_rank >= 0) w.Field("comm_rank", op.comm_rank);
  if (op.comm_size >= 0) w.Field("comm_size", op.comm_size);
  if (op.seq > 0) w.Field("seq", static_cast<unsigned long long>(op.seq));
  w.Field("peer", op.peer);
  if (op.bytes > 0) w.Field("bytes", static_cast<unsigned long long>(op.bytes));
  w.Field("state", op.running ? "running" : "pending");
  if (!op.running && op.blocked_by >= 0) w.Field("blocked_by", op.blocked_by);
  w.Field("in_flight_s", op.in_flight_s);
  if (op.last_on_stream) w.Field("last_on_stream", true).Field("since_launch_s", op.since_launch_s);
  if (op.head_of_stream) w.Field("head_of_stream", true);
  w.EndObject();
}

}  // namespace

const char* ReasonName(Reason reason) {
  switch (reason) {
    case Reason::kHang: return "hang";
    case Reason::kRequest: return "request";
    case Reason::kSignal: return "signal";
  }
  return "request";
}

const char* ProcessStateName(char code) {
  switch (code) {
    case 'R': return "running";
    case 'S': return "sleeping";
    case 'D': return "uninterruptible sleep (usually I/O or a driver call)";
    case 'Z': return "zombie";
    case 'T': return "stopped";
    case 't': return "tracing stop";
    case 'X': return "dead";
    case 'I': return "idle";
    case 'P': return "parked";
    case 'W': return "waking";
    case 'K': return "wakekill";
    default: return "unknown";
  }
}

std::string StackFileName(const RankInfo& rank) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%05d-%05d.stacktrace", rank.rank, rank.world_size);
  return buf;
}

std::string StackDumpToJson(const StackDump& d) {
  JsonWriter w;
  w.BeginObject()
      .Field("format", "xtimer-stacktrace")
      .Field("version", 1)
      .Field("rank", d.rank.rank)
      .Field("world_size", d.rank.world_size)
      .Field("local_rank", d.rank.local_rank)
      .Field("host", d.host)
      .Field("pid", static_cast<int>(d.pid))
      .Field("reason", ReasonName(d.reason))
      .Field("time", d.time)
      .Field("symbolized", false);
  const char code[2] = {d.process_state, '\0'};
  w.Key("process_state").BeginObject().Field("code", code).Field("name", ProcessStateName(d.process_state)).EndObject();
  if (!d.trigger.empty()) w.Field("trigger", d.trigger);
  w.Key("capture")
      .BeginObject()
      .Field("duration_ms", d.capture_ms)
      .Field("max_thread_stop_us", d.max_stop_us)
      .Field("python", d.python);
  if (!d.python_thread_names.empty()) w.Field("python_thread_names", d.python_thread_names);
  w.EndObject();

  w.Key("inflight_ops").BeginArray();
  for (const InflightOp& op : d.inflight) WriteOp(w, op);
  w.EndArray();

  w.Key("modules").BeginArray();
  for (const ModuleInfo& m : d.modules) {
    w.BeginObject().Field("path", m.path);
    if (!m.build_id.empty()) w.Field("build_id", m.build_id);
    w.EndObject();
  }
  w.EndArray();

  w.Key("threads").BeginArray();
  for (const ThreadDump& t : d.threads) {
    const char state[2] = {t.state, '\0'};
    w.BeginObject().Field("tid", static_cast<int>(t.tid)).Field("name", t.name);
    if (!t.python_name.empty()) w.Field("python_name", t.python_name);
    w.Field("main", t.tid == d.pid).Key("holds_gil");
    if (t.holds_gil < 0) {
      w.Null();
    } else {
      w.Bool(t.holds_gil == 1);
    }
    w.Field("state", state).Field("captured", t.captured);
    if (!t.captured && !t.error.empty()) w.Field("error", t.error);
    if (t.captured && t.stop_us > 0) w.Field("stop_us", t.stop_us);
    if (t.native_truncated) w.Field("native_truncated", true);
    if (t.python_truncated) w.Field("python_truncated", true);
    w.Key("native").BeginArray();
    for (const NativeFrame& f : t.native) {
      bool known = f.module >= 0 && f.module < static_cast<int>(d.modules.size());
      w.BeginObject()
          .Field("module", known ? d.modules[f.module].path : std::string("[unknown]"))
          .Field("offset", Hex(f.offset))
          .EndObject();
    }
    w.EndArray();
    w.Key("python");
    WritePythonFrames(w, t.python);
    w.EndObject();
  }
  w.EndArray();

  if (!d.python_unmatched.empty()) {
    w.Key("python_unmatched").BeginArray();
    for (const UnmatchedPython& u : d.python_unmatched) {
      w.BeginObject().Field("thread_id", Hex(u.thread_id));
      if (!u.python_name.empty()) w.Field("python_name", u.python_name);
      if (u.truncated) w.Field("python_truncated", true);
      w.Key("python");
      WritePythonFrames(w, u.frames);
      w.EndObject();
    }
    w.EndArray();
  }
  w.EndObject();
  std::string out = w.Take();
  out += '\n';
  return out;
}

bool WriteStackFile(const std::string& path, const std::string& content, std::string* error) {
  // Whole for readers, not fsync'ed: on a busy disk a sync stalled the dumper for a minute.
  AtomicWrite how;
  how.sync = false;
  return WriteFileAtomically(path, content, error, how);
}

}  // namespace xtimer::capture
