// One completed training step of one rank, as the rank reports it (docs/formats.md, "Step
// record"): its boundaries, GPU busy and idle time, kernel time per signature, every collective
// it issued with its GPU start and end, Python GC and DataLoader time, and (while asked) Python
// stack samples of its main thread. Times are the rank's host CLOCK_REALTIME in seconds; the
// judge removes the offset between nodes' clocks itself.
//
// Records come from outside (a rank's message, a file, an agent's gRPC call): every reader passes
// them through CheckStepRecord, the one set of rules, before anything else uses them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace xtimer::slowdown {

struct KernelTime {
  std::string sig;  // kernel name, or "GEMM <dtype> MxNxK"
  uint32_t n = 0;   // launches in the step
  double s = 0;     // their GPU time in all
  double tflops = 0;
};

struct CollTime {
  std::string comm;  // communicator id, the same on every member
  int64_t seq = 0;   // this collective's number on the communicator, the same on every member
  std::string op;    // AllReduce, AllGather, ...
  uint64_t bytes = 0;
  int32_t ranks = 0;  // member count
  double call = 0;    // host time of the NCCL call
  double start = 0;   // the GPU kernel's start on this rank: its arrival
  double end = 0;     // the GPU kernel's end on this rank
};

struct StackSample {
  std::string frames;  // "function (file:line);caller (file:line)", innermost first
  uint32_t n = 0;
};

struct StepRecord {
  int32_t rank = -1;
  int32_t world = 0;
  std::string node;
  int64_t pid = 0;
  int64_t step = 0;
  double t_begin = 0, t_end = 0;
  double gpu_busy_s = 0, gpu_idle_s = 0, issue_latency_s = 0;
  std::vector<KernelTime> kernels;
  std::vector<CollTime> colls;
  double gc_s = 0, data_s = 0;
  std::vector<StackSample> samples;
};

// What a reader keeps of a record; more entries are dropped, longer strings cut (never split
// inside a UTF-8 character).
struct StepLimits {
  static constexpr int32_t kMaxWorld = 1 << 20;
  static constexpr size_t kMaxKernels = 32;
  static constexpr size_t kMaxColls = 256;
  static constexpr size_t kMaxSamples = 64;
  static constexpr size_t kMaxNode = 255;
  static constexpr size_t kMaxSig = 256;
  static constexpr size_t kMaxComm = 128;
  static constexpr size_t kMaxOp = 64;
  static constexpr size_t kMaxFrames = 4096;
  static constexpr double kMaxStepSeconds = 86400;
};

// The rules: rank in [0, world), world in [1, 2^20]; times finite, t_begin <= t_end, a step at
// most a day long; durations finite and not negative; strings cut and entries dropped beyond
// StepLimits. A collective without a communicator, with start after end or a member count below
// 1 is dropped, and so is a kernel without a signature; everything else of the record stays.
// False (and *why, one line) when the record as a whole cannot be used.
bool CheckStepRecord(StepRecord* record, std::string* why);

}  // namespace xtimer::slowdown
