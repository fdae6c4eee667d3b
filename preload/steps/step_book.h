// The facts of a rank's open steps, gathered as they arrive and handed out once complete: GPU
// intervals (for busy and idle time), kernel time per class, issue latencies, collectives, Python
// GC and DataLoader spans, Python stack samples.
//
// A step is the host-time window [begin, end) between two anchor calls (step_detector.h). Facts
// arrive late and out of order (a GPU op completes after the next step began; CUPTI records come
// in batches), so each is placed by its own time: a GPU interval is split over the windows it
// overlaps, a kernel goes to the window of its GPU start, a collective and an issue latency to
// the window of the host call, a span is split like an interval, a sample goes by its time.
// Facts before the first window are dropped (counted in `late`).
//
// Pure bookkeeping, one thread (the poller). Times are host CLOCK_MONOTONIC ns.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace xtimer {

struct StepColl {
  int comm = -1;     // comm table slot
  uint64_t seq = 0;  // the op's number on its communicator
  uint32_t class_id = 0;
  uint64_t call_ns = 0;
  uint64_t start_ns = 0;  // GPU start on the host clock; 0 unknown
  uint64_t end_ns = 0;
};

struct StepKernel {
  uint64_t n = 0;
  uint64_t ns = 0;
};

enum class SpanKind : uint8_t { kGc = 1, kData = 2 };

// One finished step.
struct StepFacts {
  uint64_t step = 0;
  uint64_t begin_ns = 0, end_ns = 0;
  uint64_t busy_ns = 0;                              // union of GPU intervals within the window
  int64_t issue_latency_ns = -1;                     // median; -1 when no op was timed
  std::unordered_map<uint32_t, StepKernel> kernels;  // by op class
  std::vector<StepColl> colls;                       // in call order
  uint64_t gc_ns = 0, data_ns = 0;
  std::vector<std::pair<std::string, uint32_t>> samples;  // frames, count; most first
};

class StepBook {
 public:
  static constexpr size_t kMaxColls = 64;
  static constexpr size_t kMaxLatencies = 4096;
  static constexpr size_t kMaxSampleStacks = 16;
  static constexpr size_t kMaxOpen = 32;  // open windows kept; the oldest is handed out beyond

  // Step `step` begins at `t_ns`; the open step before it ends there.
  void Begin(uint64_t step, uint64_t t_ns);

  void AddInterval(uint64_t start_ns, uint64_t end_ns);
  void AddKernel(uint32_t class_id, uint64_t start_ns, uint64_t dur_ns);
  void AddIssueLatency(uint64_t issue_ns, uint64_t start_ns);
  void AddColl(const StepColl& c);
  void AddSpan(SpanKind kind, uint64_t begin_ns, uint64_t end_ns);
  void AddSample(uint64_t t_ns, const std::string& frames);

  // Hands out the oldest step whose window has ended when every fact up to its end is in:
  // `complete_to_ns` is a time up to which all facts have arrived. False if none.
  bool TakeFinished(uint64_t complete_to_ns, StepFacts* out);
  // Any step with an end, whatever is still missing (at exit).
  bool TakeEnded(StepFacts* out);

  bool open() const { return !open_.empty(); }
  uint64_t late() const { return late_; }

 private:
  struct Open {
    StepFacts facts;
    std::vector<std::pair<uint64_t, uint64_t>> intervals;
    std::vector<int64_t> latencies;
    std::unordered_map<std::string, uint32_t> samples;
  };
  // The open step whose window holds t, or null.
  Open* At(uint64_t t_ns);
  void Finish(Open& o, StepFacts* out);
  template <typename Fn>
  void Overlapping(uint64_t begin_ns, uint64_t end_ns, Fn&& fn);

  std::deque<Open> open_;          // oldest first; the last has end_ns 0 (still running)
  std::vector<StepFacts> forced_;  // pushed out by kMaxOpen, handed out first
  uint64_t late_ = 0;
};

}  // namespace xtimer
