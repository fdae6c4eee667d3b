#include "preload/steps/step_detector.h"

#include <algorithm>

namespace xtimer {
namespace {
constexpr size_t kHistory = 3 * StepDetector::kMaxPeriod;
}  // namespace

bool StepDetector::Feed(uint32_t key, uint64_t t_ns, uint64_t seq, int comm, uint64_t* step) {
  hist_.push_back(Entry{key, t_ns, seq, comm});
  if (hist_.size() > kHistory) hist_.erase(hist_.begin(), hist_.begin() + (hist_.size() - kHistory));
  if (!locked_) {
    TryLock();
    return false;
  }
  if (key != anchor_key_) {
    if (++since_anchor_ > 4 * period_ + 16) Unlock();
    return false;
  }
  since_anchor_ = 0;
  if (++anchor_count_ < anchor_per_period_) return false;
  anchor_count_ = 0;
  if (first_boundary_) {
    // The job's step index as every rank that picks the same anchor counts it: the anchor's
    // place on its communicator, whose collectives repeat per period.
    // After starting over, numbers still only grow.
    uint64_t n = seq > 0 ? (seq - 1) / anchor_comm_per_period_ : 0;
    step_ = any_step_ && n <= step_ ? step_ + 1 : n;
    first_boundary_ = false;
    any_step_ = true;
  } else {
    ++step_;
  }
  *step = step_;
  return true;
}

bool StepDetector::TryLock() {
  const size_t n = hist_.size();
  for (size_t p = 1; p <= kMaxPeriod && 3 * p <= n; ++p) {
    const size_t len = std::max(3 * p, kMinHistory);
    if (len > n) continue;
    bool periodic = true;
    for (size_t i = n - len + p; i < n && periodic; ++i) periodic = hist_[i].key == hist_[i - p].key;
    if (!periodic) continue;

    // The anchor: the call after the longest pause (averaged over the last three periods),
    // among classes that occur once per period if there are any.
    const size_t last = n - p;  // first index of the last period
    size_t best = p;            // phase
    bool best_unique = false;
    double best_gap = -1;
    for (size_t j = 0; j < p; ++j) {
      const uint32_t k = hist_[last + j].key;
      size_t count = 0;
      for (size_t i = last; i < n; ++i) count += hist_[i].key == k;
      double gap = 0;
      int gaps = 0;
      for (size_t r = 0; r < 3; ++r) {
        const size_t i = last + j - r * p;
        if (i >= 1 && i < n) {
          gap += static_cast<double>(hist_[i].t_ns) - static_cast<double>(hist_[i - 1].t_ns);
          ++gaps;
        }
      }
      gap = gaps > 0 ? gap / gaps : 0;
      const bool unique = count == 1;
      if ((unique && !best_unique) || (unique == best_unique && gap > best_gap)) {
        best = j;
        best_unique = unique;
        best_gap = gap;
      }
    }
    const Entry& a = hist_[last + best];
    anchor_key_ = a.key;
    anchor_comm_ = a.comm;
    anchor_per_period_ = 0;
    anchor_comm_per_period_ = 0;
    for (size_t i = last; i < n; ++i) {
      anchor_per_period_ += hist_[i].key == a.key;
      anchor_comm_per_period_ += hist_[i].comm == a.comm;
    }
    anchor_comm_per_period_ = std::max<size_t>(anchor_comm_per_period_, 1);
    // Calls of the anchor's class after the anchor itself: the next boundary is the m-th.
    anchor_count_ = 0;
    since_anchor_ = 0;
    for (size_t i = last + best + 1; i < n; ++i) {
      if (hist_[i].key == a.key) {
        ++anchor_count_;
        since_anchor_ = 0;
      } else {
        ++since_anchor_;
      }
    }
    period_ = p;
    locked_ = true;
    first_boundary_ = true;
    return true;
  }
  return false;
}

void StepDetector::Unlock() {
  locked_ = false;
  period_ = 0;
  ++relearned_;
}

}  // namespace xtimer
