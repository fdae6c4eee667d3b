// The offset of each node's clock from a reference node's, learned from collectives: every
// member of one collective ends it at (nearly) the same moment, so the difference of two nodes'
// end times for the same collective is the difference of their clocks. Each collective that spans
// several nodes gives one difference per node against its lowest node (a star, not every pair);
// each pair keeps its last 64 differences and uses their median, so a late record or a collective
// that ended unevenly does not move it. Offsets follow the pairs outward from the reference
// (breadth first); a node that shares no collective with the reference's group has no offset.
//
// Ranks of one node share a clock, so offsets are per node. Not thread-safe (the judge owns one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <vector>

namespace xtimer::slowdown {

class ClockOffsets {
 public:
  // One collective: (node, that node's end time on its own clock), at least two nodes.
  void AddCollective(const std::vector<std::pair<int, double>>& node_ends);
  // Recomputes every offset from `reference` over nodes 0..node_count-1.
  void Update(int reference, int node_count);
  // The node's clock minus the reference's; 0 when unknown.
  double Offset(int node) const { return node >= 0 && node < static_cast<int>(offset_.size()) ? offset_[node] : 0; }
  bool Known(int node) const { return node >= 0 && node < static_cast<int>(known_.size()) && known_[node]; }

  static constexpr size_t kKept = 64;
  static constexpr size_t kMinSamples = 3;  // a pair with fewer is not used

 private:
  std::map<std::pair<int, int>, std::deque<double>> diffs_;  // (a, b), a < b: end on b minus end on a
  std::vector<double> offset_;
  std::vector<char> known_;
};

}  // namespace xtimer::slowdown
