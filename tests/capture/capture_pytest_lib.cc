// A small C library that Python tests load with ctypes: starts the dumper in the interpreter's
// process (as the preload will), offers a call that blocks while holding the GIL, and times the
// Python readers.
#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

#include "preload/capture/dumper.h"
#include "preload/capture/fault_guard.h"
#include "preload/capture/python_capture.h"

extern "C" {

// 1 on success. Stack files go to `dir`; the rank comes from RANK/WORLD_SIZE.
__attribute__((visibility("default"))) int xtc_start(const char* dir) {
  xtimer::capture::DumperOptions opt;
  opt.timeline_path = dir;
  return xtimer::capture::Dumper::Instance().Start(nullptr, opt) ? 1 : 0;
}

// Called through ctypes.PyDLL, so the GIL stays held: reads one byte from fd (blocking) and
// returns it, or -errno. noinline: its name must show in the symbolised native stack.
__attribute__((visibility("default"), noinline)) int xtc_read_byte_holding_gil(int fd) {
  unsigned char c = 0;
  ssize_t n = read(fd, &c, 1);
  if (n == 1) return c;
  return n < 0 ? -errno : -1000;
}

// For py_names_bench.py: microseconds per read, `reps` reads each, of every thread's Python
// frames (CPython's dumper, names included) and of the thread names alone. *named: names found.
// Returns 0, or -1 when Python or its names cannot be read here.
__attribute__((visibility("default"))) int xtc_time_python_reads(int minor, int reps, double* frames_us,
                                                                 double* names_us, int* named) {
  using Clock = std::chrono::steady_clock;
  xtimer::capture::PythonCapture py;
  xtimer::capture::PythonThreadNames names;
  if (!py.Init() || !names.Init(minor, [](const char* s) { return dlsym(RTLD_DEFAULT, s); })) return -1;
  std::vector<xtimer::capture::PyThreadStack> stacks;
  std::unordered_map<uint64_t, std::string> found;
  std::string error;
  if (!py.Dump(&stacks, &error)) return -1;  // warm up
  Clock::time_point t0 = Clock::now();
  for (int i = 0; i < reps; ++i) py.Dump(&stacks, &error);
  Clock::time_point t1 = Clock::now();
  // The dump takes the process's fault guard itself, so the names' guard lives only here.
  xtimer::capture::FaultGuard guard;
  if (!names.Read(&guard, &found, &error)) return -1;  // warm up
  Clock::time_point t2 = Clock::now();
  for (int i = 0; i < reps; ++i) names.Read(&guard, &found, &error);
  Clock::time_point t3 = Clock::now();
  *frames_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / reps;
  *names_us = std::chrono::duration<double, std::micro>(t3 - t2).count() / reps;
  *named = static_cast<int>(found.size());
  return 0;
}

}  // extern "C"
