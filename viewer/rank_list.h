// The ranks of one tree node, as ascending runs of consecutive ranks. A node that 4,096 ranks
// pass through holds one run (0-4095); a node of one rank's 50,000 distinct threads holds one
// rank: both fit in the object (24 bytes) with no heap block. More runs go to a heap array.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace xtimer {

class RankList {
 public:
  // Adds a rank. Ranks come mostly ascending (a merger reads a file per rank); a rank equal to the
  // last one added is ignored (several threads of one rank); any other order is put right by
  // Finish.
  void Add(int32_t rank);
  // Adds all of other's ranks (merging trees read by several threads).
  void Append(const RankList& other);
  // Sorts the runs and merges those that overlap or touch: ascending, every rank once.
  void Finish();

  // The number of ranks; exact after Finish (before it, a rank added out of order twice counts twice).
  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  std::vector<int32_t> ToVector() const;
  // So that RankSet(node.ranks) and the like read a node's ranks as a list.
  operator std::vector<int32_t>() const { return ToVector(); }
  bool operator==(const RankList& other) const { return ToVector() == other.ToVector(); }

 private:
  struct Run {
    int32_t first, last;  // inclusive
  };
  void AddRun(Run run);

  Run first_{0, -1};
  std::unique_ptr<std::vector<Run>> more_;  // the runs after first_; null when there are none
  uint32_t count_ = 0;
};

}  // namespace xtimer
