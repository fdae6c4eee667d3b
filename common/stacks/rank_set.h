// A set of ranks of one job and its folded text form: ranks 0,1,2,3,5,7,8 read "0-3/5/7-8", the
// form the seed tool puts into frame labels (`func@source@stuck_ranks|leak_ranks`). Shared by the
// viewer, the collector and anything that prints rank lists.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace xtimer {

class RankSet {
 public:
  RankSet() = default;
  // Any order, duplicates allowed; negative ranks are dropped.
  explicit RankSet(std::vector<int32_t> ranks);
  static RankSet Range(int32_t first, int32_t end);  // [first, end)

  bool empty() const { return ranks_.empty(); }
  size_t size() const { return ranks_.size(); }
  bool Contains(int32_t rank) const;
  const std::vector<int32_t>& ranks() const { return ranks_; }  // ascending, unique

  // The ranks of [0, world_size) that are not in this set.
  RankSet Complement(int32_t world_size) const;
  RankSet Minus(const RankSet& other) const;

  // "0-3/5/7-8"; "" for the empty set. With max_ranges > 0 and more ranges than that, the first
  // max_ranges ranges are written followed by "/...+N" (N ranks left out).
  std::string Fold(size_t max_ranges = 0) const;
  // The inverse of Fold (without truncation); nullopt on anything but "a[-b]/c[-d]..." with
  // ascending, non-overlapping ranges.
  static std::optional<RankSet> ParseFolded(std::string_view text);
  // Complement(world_size).Fold(max_ranges) without building the complement: the cost is the
  // size of this set, not the world size (a label per tree node must not cost O(world)).
  std::string FoldComplement(int32_t world_size, size_t max_ranges = 0) const;

  friend bool operator==(const RankSet&, const RankSet&) = default;

 private:
  std::vector<int32_t> ranks_;
};

// Shorthand for RankSet(ranks).Fold().
std::string FoldRanks(std::span<const int32_t> ranks);

}  // namespace xtimer
