// The in-memory form of one rank's stack file (docs/formats.md, "Stack file"). Plain data: the
// reader fills it, the viewer and the collector merge it. Frames are root first, as in the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace xtimer {

inline constexpr const char* kStackFileFormat = "xtimer-stacktrace";
inline constexpr int kStackFileVersion = 1;  // the newest version this code understands
// The largest world_size accepted (2^20 ranks, beyond any job today): a file claiming more is
// refused, so that one hostile file cannot make a merge cost O(world) in time and memory.
inline constexpr int32_t kMaxStackWorldSize = int32_t{1} << 20;
// The longest string (frame name, file, module, thread name, trigger, ...) a reader keeps. A
// longer one is cut to this many bytes (at a UTF-8 character boundary) and kStackStringCutMark is
// appended: no renderer ever sees more (the call-graph layout took time quadratic in a name's
// length: 7.4 s for one 4 MB name). Real names, even long C++ templates, stay far below it.
inline constexpr size_t kMaxStackStringBytes = 4096;
inline constexpr const char* kStackStringCutMark = "...[cut]";

struct NativeFrame {
  std::string module;    // path of the ELF object; may be empty when unknown
  std::string offset;    // hex offset inside module, as written ("0x1a2b0")
  std::string function;  // demangled; empty when not symbolised
  std::string file;      // empty when unknown
  int64_t line = 0;      // 0 when unknown
  bool inlined = false;
};

struct PythonFrame {
  std::string function;
  std::string file;
  int64_t line = 0;
};

struct StackThread {
  int64_t tid = 0;
  std::string name;         // the OS name
  std::string python_name;  // the name Python's threading gave it; "" when none
  bool main = false;
  std::optional<bool> holds_gil;  // nullopt: unknown / no Python
  std::string state;              // "S", "R", "D", ... ("" when absent)
  std::vector<NativeFrame> native;
  std::vector<PythonFrame> python;
};

struct InflightOp {
  std::string name;
  std::string kind;  // as written: the name of an OpKind (common/kinds.h), or a newer writer's kind
  std::string stream;
  std::string comm;  // "" when not a communication op
  int64_t comm_rank = -1;
  int64_t comm_size = -1;
  int64_t seq = -1;  // -1 when absent
  int64_t peer = -1;
  int64_t bytes = -1;
  std::string state;  // running, pending
  double in_flight_s = 0;
  int64_t blocked_by = -1;
};

struct StackFile {
  int version = 0;
  int32_t rank = -1;
  int32_t world_size = 0;
  int32_t local_rank = -1;
  std::string host;
  int64_t pid = 0;
  std::string reason;
  std::string time;
  bool symbolized = false;
  std::string process_state_code;
  std::string process_state_name;
  std::string trigger;
  std::vector<InflightOp> inflight_ops;
  std::vector<StackThread> threads;

  // The thread marked main, else the one whose tid is the pid, else the first; nullptr if none.
  const StackThread* MainThread() const;
};

}  // namespace xtimer
