// What the poller hands on, as narrow interfaces the parts above it implement: the step records
// (StepSink: steps/step_signals.h) and the summaries for the node agent (SummarySink: the agent
// link). The tracker wires them at start-up; the poller never reaches those parts otherwise.
#pragma once

#include <cstdint>
#include <string>

#include "preload/timing/cupti_backend.h"
#include "preload/timing/op_record.h"

namespace xtimer {

// The step records (XTIMER_STEPS): the facts of each op, as the poller sees them.
class StepSink {
 public:
  // Under the poller's lock (the poller's thread, or a Snapshot that drains the queue):
  // a record taken from the launch queue, in issue order.
  virtual void OnIssued(const OpRecord& rec) = 0;
  // Poller thread, under its lock: an event-paired op finished; GPU start on the host clock
  // (0: unknown) and duration.
  virtual void OnTimed(const OpRecord& rec, uint64_t start_ns, uint64_t dur_ns) = 0;
  // Poller thread, under its lock: an op from a CUPTI record, of class `class_id`.
  virtual void OnCupti(uint32_t class_id, const CuptiOp& op) = 0;
  // Poller thread, under its lock: takes Python spans and samples in, closes complete steps.
  // `oldest_pending_ns`: issue time of the oldest event-paired op not finished (UINT64_MAX: none).
  virtual void Collect(uint64_t now_ns, uint64_t oldest_pending_ns) = 0;
  // Poller thread, outside its lock: takes a Python sample if one is due, writes the records
  // Collect closed.
  virtual void Publish(uint64_t now_ns) = 0;
  // At exit (poller stopped): closes every step that ended and writes it.
  virtual void Finish(uint64_t now_ns) = 0;
  // Under the poller's lock: facts of GPU work are wanted (a step has begun, or the period is
  // known and the first step is about to: the GPU clock gets its first reference before it).
  virtual bool wants_gpu() const = 0;

 protected:
  ~StepSink() = default;
};

// The node agent's copy of the summary (the agent link).
class SummarySink {
 public:
  // Whether anybody takes summaries (a node agent is configured): the poller builds none otherwise.
  virtual bool active() const = 0;
  // Poller: the latest summary JSON (sent with the next tick).
  virtual void OfferSummary(std::string summary_json) = 0;
  // At exit: waits (at most `ms`) until what was offered has been sent.
  virtual void Flush(int ms) = 0;

 protected:
  ~SummarySink() = default;
};

}  // namespace xtimer
