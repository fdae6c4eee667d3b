#include "preload/steps/python_sampler.h"

#include <unistd.h>

#include <algorithm>

#include "common/clock.h"
#include "common/log.h"
#include "preload/hang/blocked_threads.h"
#include "preload/steps/python_hooks.h"

namespace xtimer {

void PythonSampler::Request(double seconds, double hz) {
  if (!(seconds > 0) || !(hz > 0)) return;
  seconds = std::min(seconds, kMaxSeconds);
  hz = std::min(hz, kMaxHz);
  period_ns_.store(static_cast<uint64_t>(1e9 / hz), std::memory_order_relaxed);
  until_ns_.store(MonotonicNs() + static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
}

std::string PythonSampler::MainStack(const std::vector<capture::PyThreadStack>& threads, uint64_t main_thread) {
  const capture::PyThreadStack* main = nullptr;
  for (const auto& t : threads)
    if (main_thread != 0 && t.thread_id == main_thread) main = &t;
  if (main == nullptr && !threads.empty()) main = &threads.back();
  if (main == nullptr) return {};
  std::string out;
  size_t kept = 0;
  for (auto it = main->frames.rbegin(); it != main->frames.rend() && kept < kMaxFrames; ++it, ++kept) {
    if (!out.empty()) out += ';';
    const std::string& file = it->file;
    size_t slash = file.rfind('/');
    out += it->function;
    out += " (";
    out += slash == std::string::npos ? file : file.substr(slash + 1);
    out += ':';
    out += std::to_string(it->line);
    out += ')';
  }
  return out;
}

bool PythonSampler::SampleIfDue(uint64_t now_ns, std::string* frames) {
  if (!active(now_ns) || now_ns < next_ns_) return false;
  next_ns_ = now_ns + period_ns_.load(std::memory_order_relaxed);
  if (!tried_init_) {
    tried_init_ = true;
    if (!py_.Init()) Log(LogLevel::kInfo, "Python samples asked for, but not available: %s", py_.status().c_str());
  }
  if (!py_.available()) return false;
  std::vector<capture::PyThreadStack> threads;
  std::string error;
  if (!py_.Dump(&threads, &error)) return false;
  // The main thread waiting in a synchronising CUDA call is the host waiting for the GPU, not
  // host work: such a sample is left out (the step's issue latency and idle time tell that story).
  const pid_t main_tid = getpid();
  for (const BlockedCall& b : BlockedThreads::Snapshot())
    if (b.tid == main_tid && b.kind == OpKind::kSync) return false;
  *frames = MainStack(threads, python::MainThread());
  return !frames->empty();
}

}  // namespace xtimer
