// Log-linear latency histogram in fixed memory: 32 linear sub-buckets per power of two from
// 1 ns up to ~1.2 days, so any percentile is within 1/32 (~3%) of the true value, reported at
// the bucket midpoint (error <= ~1.6%). Single writer (the poller thread); not thread-safe.
#pragma once

#include <array>
#include <cstdint>

namespace xtimer {

class Histogram {
 public:
  void Add(uint64_t ns);
  uint64_t count() const { return count_; }
  double mean_ns() const { return count_ ? static_cast<double>(sum_ns_) / count_ : 0; }
  uint64_t max_ns() const { return max_ns_; }
  uint64_t min_ns() const { return count_ ? min_ns_ : 0; }
  uint64_t sum_ns() const { return sum_ns_; }
  // q in [0, 1]; 0 when empty.
  double Quantile(double q) const;

 private:
  static constexpr int kSubBits = 5;   // 32 sub-buckets per octave
  static constexpr int kOctaves = 47;  // 2^47 ns ~ 39 hours
  static constexpr int kBuckets = (kOctaves + 1) << kSubBits;
  static int BucketOf(uint64_t ns);
  static double MidpointOf(int bucket);

  std::array<uint32_t, kBuckets> buckets_{};
  uint64_t count_ = 0;
  uint64_t sum_ns_ = 0;
  uint64_t max_ns_ = 0;
  uint64_t min_ns_ = UINT64_MAX;
};

}  // namespace xtimer
