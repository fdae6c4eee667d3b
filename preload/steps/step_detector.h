// Finds a rank's training step in its own stream of collectives, with no framework API.
//
// A training step issues the same sequence of collectives every time (the gradient buckets'
// all-reduces, FSDP's all-gathers and reduce-scatters, a loss all-reduce...). The detector keeps
// the recent sequence of collective classes (API, bytes, data type, communicator) and looks for
// its smallest period P: the last max(3P, kMinHistory) collectives repeat with period P. The
// step boundary is then one collective of the period, the anchor: the one after the longest
// host-side pause in the period (the forward pass and data loading come before the first
// collective of backward), preferring a class that occurs once per period. From then on every
// anchor class call (every m-th, if it occurs m times per period) begins a step, so a step with
// an extra collective (a checkpoint's barrier) or one missing does not lose the count. When the
// anchor class is not seen for 4 periods (the job changed phase), the detector starts over.
//
// Pure logic, one thread (the poller). Times are host CLOCK_MONOTONIC ns of the calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace xtimer {

class StepDetector {
 public:
  static constexpr size_t kMaxPeriod = 256;  // collectives per step that can be recognised
  static constexpr size_t kMinHistory = 32;  // collectives a period must hold over before it counts

  // A collective of class `key` called at host time `t_ns`, the `seq`-th on its communicator
  // (1-based), that communicator being `comm`. True when it begins a step; *step is then the
  // step's number: the anchor's place on its communicator divided by that communicator's
  // collectives per period, so ranks that pick the same anchor number their steps alike, and
  // one more than the previous step's after that.
  bool Feed(uint32_t key, uint64_t t_ns, uint64_t seq, int comm, uint64_t* step);

  bool locked() const { return locked_; }
  size_t period() const { return locked_ ? period_ : 0; }
  uint32_t anchor() const { return anchor_key_; }
  // Times the detector started over after having found a period.
  uint64_t relearned() const { return relearned_; }

 private:
  struct Entry {
    uint32_t key;
    uint64_t t_ns;
    uint64_t seq;
    int comm;
  };
  bool TryLock();
  void Unlock();

  std::vector<Entry> hist_;  // the last kHistory collectives, oldest first (while not locked)
  bool locked_ = false;
  size_t period_ = 0;
  uint32_t anchor_key_ = 0;
  int anchor_comm_ = -1;
  size_t anchor_per_period_ = 1;       // occurrences of the anchor's class in one period
  size_t anchor_comm_per_period_ = 1;  // collectives on the anchor's communicator in one period
  size_t anchor_count_ = 0;            // anchor-class calls since the last boundary
  size_t since_anchor_ = 0;            // collectives since the anchor class was last seen
  uint64_t step_ = 0;
  bool first_boundary_ = true;
  bool any_step_ = false;
  uint64_t relearned_ = 0;
};

}  // namespace xtimer
