// The few statistics the judge uses, chosen to shrug off one odd step: medians across ranks, an
// upper-trimmed mean over a rank's steps (a rare long step, such as a checkpoint, is dropped; a
// pause in every third step is not), and where a run of high values began. Header only; no state.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace xtimer::slowdown {

// The median of `v` (reordered); 0 when empty.
inline double MedianOf(std::vector<double>& v) {
  if (v.empty()) return 0;
  size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  double lo = *std::max_element(v.begin(), v.begin() + mid);
  return (lo + hi) / 2;
}

// The mean of `v` (reordered) without its largest tenth (at least one value once there are five):
// the estimate of a rank's per-step time for a window. 0 when empty.
inline double TrimmedMeanOf(std::vector<double>& v) {
  if (v.empty()) return 0;
  size_t drop = v.size() >= 5 ? std::max<size_t>(1, v.size() / 10) : 0;
  size_t keep = v.size() - drop;
  std::nth_element(v.begin(), v.begin() + (keep - 1), v.end());
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += v[i];
  return sum / static_cast<double>(keep);
}

// Where the present run of values at or above `level` began: `points` are (time, value) in time
// order; walking back from the newest, the run goes on until three values in a row are below the
// level (a dip of one or two steps inside it is noise). The time of the earliest point at or above
// the level in the run; `fallback` when the newest values are not above it at all.
struct TimedValue {
  double t;
  double value;
};
inline double OnsetOf(const std::vector<TimedValue>& points, double level, double fallback) {
  double onset = fallback;
  size_t above = 0, below_in_a_row = 0;
  for (size_t i = points.size(); i-- > 0;) {
    if (points[i].value >= level) {
      ++above;
      below_in_a_row = 0;
      onset = points[i].t;
    } else if (++below_in_a_row >= 3) {
      break;
    }
  }
  return above > 0 ? onset : fallback;
}

// The median of every rank's value but one rank's own: exact for groups of up to 32 (where one
// value moves the median), the median of all for larger ones (where it does not).
class PeerMedian {
 public:
  void Add(int32_t rank, double v) { values_.emplace_back(rank, v); }
  // After the last Add.
  void Done() {
    std::vector<double> v;
    for (auto& [r, x] : values_) v.push_back(x);
    all_ = MedianOf(v);
  }
  double Of(int32_t rank) const {
    if (values_.size() > 32) return all_;
    std::vector<double> v;
    for (auto& [r, x] : values_)
      if (r != rank) v.push_back(x);
    return v.empty() ? all_ : MedianOf(v);
  }
  size_t size() const { return values_.size(); }

 private:
  std::vector<std::pair<int32_t, double>> values_;
  double all_ = 0;
};

}  // namespace xtimer::slowdown
