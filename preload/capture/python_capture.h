// Python frames of every Python thread, read without the GIL.
//
// CPython's fault-handler dumper, _Py_DumpTracebackThreads(fd, interp, tstate), walks the thread
// states and frames without taking the GIL or any lock and writes a fixed text format; it is
// what faulthandler runs on a crash or from its watchdog thread. We call it from the dumper thread
// into a memfd and parse the text. No Python is linked: symbols are looked up at run time, in the
// executable (Debian's /usr/bin/python3.11 is static and exports them) or in libpython, and where
// the build hides the dumper (3.10, 3.13 shared builds) in the library's .symtab on disk.
//
// Which thread holds the GIL is asked inside each thread's capture handler with
// PyGILState_Check() (see python_capture.cc for why that is safe there).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "preload/capture/python_thread_names.h"
#include "preload/capture/stack_dump.h"

namespace xtimer::capture {

struct PyThreadStack {
  uint64_t thread_id = 0;           // pthread_t of the thread, as CPython prints it
  std::vector<PythonFrame> frames;  // root first
  bool truncated = false;           // CPython stops at 100 frames (the outermost are lost)
  std::string name;                 // threading's name for it ("MainThread"); "" if none
};

// Parses faulthandler's all-threads text ("Thread 0x... (most recent call first):" then
// "  File \"f.py\", line 3 in g" lines, most recent first) into root-first stacks.
// *more_threads is set when CPython stopped listing threads ("...", at 100 threads).
std::vector<PyThreadStack> ParseFaulthandlerText(std::string_view text, bool* more_threads = nullptr);

class PythonCapture {
 public:
  // Looks for a CPython runtime (takes the loader lock: call at start-up, not at dump time).
  bool Init();
  // On the dumper thread, once: decides whether the GIL check may run in signal handlers.
  void CheckGilSafetyOnThisThread();
  bool available() const { return dump_ != nullptr; }
  // async-signal-safe GIL check for the capture handler, or null.
  int (*gil_check() const)() { return gil_safe_ ? gil_check_ : nullptr; }
  // "3.11.2", or why Python frames are not available.
  const std::string& status() const { return status_; }

  // Dumps every Python thread, with the names threading gave them (python_thread_names.h). False
  // (with *error) when Python is absent, not running, or the dumper failed; out is then empty.
  bool Dump(std::vector<PyThreadStack>* out, std::string* error);
  // After Dump: "ok" when thread names were read, else why not.
  const std::string& names_status() const { return names_status_; }

  // A libpython has been loaded since Init (so Init may be worth running again).
  bool LibpythonAppeared() const;
  // In a child after fork: its own memfd.
  void ResetAfterFork();

 private:
  using DumpFn = const char* (*)(int, void*, void*);
  DumpFn dump_ = nullptr;
  int (*is_initialized_)() = nullptr;
  int (*is_finalizing_)() = nullptr;
  int (*gil_check_)() = nullptr;
  bool gil_safe_ = false;
  std::string module_;  // object that holds the runtime
  std::string status_ = "no Python in this process";
  int memfd_ = -1;
  bool searched_libpython_ = false;
  PythonThreadNames names_;
  std::string names_status_;
};

}  // namespace xtimer::capture
