// The rank's step records (docs/formats.md, "Step records"): one record per completed training
// step, found from the rank's own collectives (step_detector.h), with the step's GPU busy and idle
// time, issue latency, kernel and GEMM time per signature, every collective's host call and GPU
// start/end, Python GC and DataLoader time (python_hooks.h) and, while the node agent asks,
// main-thread Python stack samples (python_sampler.h). Each record is appended to
// <XTIMER_TIMELINE_PATH>/<rank>-<world>.steps.jsonl in the compact layout 2 (a header, dictionary
// lines, one line per step: common/steps/step_file_writer.h) and handed to the agent link as a
// self-contained layout-1 JSON object, which it sends in batches.
//
// Everything runs on the poller thread, from what the poller already sees: nothing is added to
// the launch path and nothing waits on the GPU. The facts of a step are complete once every op
// issued up to its end has completed and CUPTI has had time to deliver its records; then the
// record is written.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/steps/step_file_writer.h"
#include "preload/steps/python_sampler.h"
#include "preload/steps/step_book.h"
#include "preload/steps/step_detector.h"
#include "preload/timing/cupti_backend.h"
#include "preload/timing/op_record.h"
#include "preload/timing/poller_sinks.h"

namespace xtimer {

class LaunchPath;

// Where the step records go besides the file (the agent link).
class StepRecordSink {
 public:
  // Poller thread: step records, one layout-1 JSON object per line.
  virtual void OfferSteps(const std::string& lines) = 0;

 protected:
  ~StepRecordSink() = default;
};

class StepSignals final : public StepSink {
 public:
  // Reads `launch`'s op classes, communicators, rank and settings; hands records to `out`.
  StepSignals(LaunchPath& launch, StepRecordSink* out);

  // StepSink (poller_sinks.h says which thread calls each, under which lock).
  void OnIssued(const OpRecord& rec) override;
  void OnTimed(const OpRecord& rec, uint64_t start_ns, uint64_t dur_ns) override;
  void OnCupti(uint32_t class_id, const CuptiOp& op) override;
  void Collect(uint64_t now_ns, uint64_t oldest_pending_ns) override;
  void Publish(uint64_t now_ns) override;
  void Finish(uint64_t now_ns) override;
  bool wants_gpu() const override { return book_.open() || detector_.locked(); }

  // Agent link thread: the agent asked for Python samples.
  void RequestSamples(double seconds, double hz) { sampler_.Request(seconds, hz); }

  const StepDetector& detector() const { return detector_; }

 private:
  slowdown::StepRecord Record(const StepFacts& f, int64_t wall_minus_mono_ns);
  int64_t WallOffset();
  void Write(const std::string& lines);

  LaunchPath& launch_;
  StepRecordSink* const out_;
  StepDetector detector_;
  StepBook book_;
  PythonSampler sampler_;
  // Frontier of completed work, as seen `grace` ago: (when seen, frontier).
  std::vector<std::pair<uint64_t, uint64_t>> frontier_;
  uint64_t delayed_frontier_ns_ = 0;
  std::vector<std::pair<uint64_t, std::string>> samples_;  // taken outside the lock, booked in Collect
  std::vector<slowdown::StepRecord> closed_;               // by Collect, written and sent by Publish
  slowdown::StepFileWriter lines_;                         // the file's header and dictionary so far
  std::string file_;
  int fd_ = -1;
  bool file_failed_ = false;
  std::string node_;
  int64_t wall_minus_mono_ns_;
};

}  // namespace xtimer
