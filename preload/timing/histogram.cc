#include "preload/timing/histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace xtimer {

// Values below 32 ns land in linear buckets 0..31; above, the octave (position of the top bit)
// selects a group of 32 buckets and the next 5 bits select the bucket inside it.
int Histogram::BucketOf(uint64_t ns) {
  if (ns < (1u << kSubBits)) return static_cast<int>(ns);
  int top = 63 - std::countl_zero(ns);  // >= kSubBits
  int octave = top - kSubBits + 1;
  int sub = static_cast<int>((ns >> (top - kSubBits)) & ((1u << kSubBits) - 1));
  int b = (octave << kSubBits) + sub;
  return std::min(b, kBuckets - 1);
}

double Histogram::MidpointOf(int bucket) {
  int octave = bucket >> kSubBits;
  int sub = bucket & ((1 << kSubBits) - 1);
  if (octave == 0) return sub;
  double width = std::ldexp(1.0, octave - 1);  // size of one sub-bucket in this octave
  double low = std::ldexp(1.0, octave + kSubBits - 1) + sub * width;
  return low + width / 2;
}

void Histogram::Add(uint64_t ns) {
  ++buckets_[BucketOf(ns)];
  ++count_;
  sum_ns_ += ns;
  max_ns_ = std::max(max_ns_, ns);
  min_ns_ = std::min(min_ns_, ns);
}

double Histogram::Quantile(double q) const {
  if (count_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  // Rank of the wanted sample, 1-based (nearest-rank definition).
  uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * count_)));
  uint64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += buckets_[b];
    if (seen >= rank) {
      double mid = MidpointOf(b);
      return std::clamp(mid, static_cast<double>(min_ns()), static_cast<double>(max_ns_));
    }
  }
  return static_cast<double>(max_ns_);
}

}  // namespace xtimer
