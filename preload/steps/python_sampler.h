// Low-rate samples of the main thread's Python stack while the node agent asks for them (its
// "sample" request: it suspects this rank of a host-side slowdown and wants the function named).
// Each sample is one read of the interpreter's frames with CPython's fault-handler walker
// (capture/python_capture.h: no GIL, no signal, nothing stops), on the poller thread outside its
// lock. A stack is written innermost first, "function (file:line)" joined by ";". A sample taken
// while the main thread waits in a synchronising CUDA call (blocked_threads.h) is left out: it
// shows the host waiting for the GPU, not where the host spends its own time.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "preload/capture/python_capture.h"

namespace xtimer {

class PythonSampler {
 public:
  static constexpr double kMaxHz = 100;
  static constexpr double kMaxSeconds = 600;
  static constexpr size_t kMaxFrames = 24;  // innermost frames kept per sample

  // Any thread: sample `hz` times a second for `seconds` from now (clamped to the limits above;
  // a new request replaces the one running).
  void Request(double seconds, double hz);
  bool active(uint64_t now_ns) const { return now_ns < until_ns_.load(std::memory_order_relaxed); }

  // Poller thread: takes a sample when one is due. True with the main thread's stack (false when
  // none is due, Python cannot be read, or the main thread waits for the GPU).
  bool SampleIfDue(uint64_t now_ns, std::string* frames);

  // The main thread's stack, innermost first, from `threads` (the one with `main_thread` as
  // its id, else the last listed: CPython lists the oldest thread last). "" if none.
  static std::string MainStack(const std::vector<capture::PyThreadStack>& threads, uint64_t main_thread);

 private:
  std::atomic<uint64_t> until_ns_{0};
  std::atomic<uint64_t> period_ns_{0};
  uint64_t next_ns_ = 0;
  bool tried_init_ = false;
  capture::PythonCapture py_;
};

}  // namespace xtimer
