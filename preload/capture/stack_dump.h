// The content of one stack file (docs/formats.md, "Stack file") and its JSON form.
// Built by the dumper on its own thread; nothing here runs in a signal handler.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "preload/base/inflight_op.h"

namespace xtimer::capture {

enum class Reason { kHang, kRequest, kSignal };
const char* ReasonName(Reason reason);  // "hang", "request", "signal"

struct NativeFrame {
  int module = -1;      // index into StackDump::modules, -1 when no loaded object holds the address
  uint64_t offset = 0;  // ELF virtual address inside the module (absolute address when module < 0)
};

struct PythonFrame {
  std::string function;
  std::string file;
  int line = -1;  // -1: the interpreter did not know ("line ???")
};

struct ThreadDump {
  pid_t tid = 0;
  std::string name;         // the OS name (comm)
  std::string python_name;  // the name threading gave it; "" if none
  char state = '?';
  int holds_gil = -1;     // 1, 0, or -1 for unknown (written as null)
  bool captured = false;  // native frames were recorded
  std::string error;      // why not, when !captured
  bool native_truncated = false;
  bool python_truncated = false;
  std::vector<NativeFrame> native;  // root first
  std::vector<PythonFrame> python;  // root first
  uint64_t pthread_id = 0;          // pthread_self() seen by the capture handler; 0 if unknown
  double stop_us = 0;               // time the thread spent in the capture handler
};

// Python threads the dump could not tie to a tid (their thread never ran the capture handler).
struct UnmatchedPython {
  uint64_t thread_id = 0;           // pthread_t as CPython prints it
  std::vector<PythonFrame> frames;  // root first
  bool truncated = false;
  std::string python_name;
};

struct ModuleInfo {
  std::string path;
  std::string build_id;  // hex GNU build-id, empty if none
};

struct StackDump {
  RankInfo rank;
  std::string host;
  pid_t pid = 0;
  Reason reason = Reason::kRequest;
  std::string time;  // ISO 8601 UTC with milliseconds
  char process_state = '?';
  std::string trigger;
  InflightOps inflight;
  std::vector<ThreadDump> threads;
  std::vector<UnmatchedPython> python_unmatched;
  std::vector<ModuleInfo> modules;
  // How the capture went (the "capture" object).
  std::string python;               // "3.11.2" when Python frames were read, else why not
  std::string python_thread_names;  // "ok" when read, else why not; "" without Python frames
  double capture_ms = 0;
  double max_stop_us = 0;
};

// "R" -> "running", "D" -> "uninterruptible sleep (usually I/O or a driver call)", ...
const char* ProcessStateName(char code);

// "<rank:05d>-<world:05d>.stacktrace"
std::string StackFileName(const RankInfo& rank);

std::string StackDumpToJson(const StackDump& dump);

// Writes `content` to NAME.tmp.<pid> and renames it over `path`: readers see the old file or the
// new one, never a part. Unlike WriteFileAtomically (common/atomic_file.h) there is no fsync: a
// stack file must survive the process, not a power cut, and on a busy disk fsync blocked the
// dumper for over a minute. False with *error on failure (the temp file is removed).
bool WriteStackFile(const std::string& path, const std::string& content, std::string* error);

}  // namespace xtimer::capture
