#include "slowdown/clock_offsets.h"

#include <algorithm>

#include "slowdown/robust_stats.h"

namespace xtimer::slowdown {

void ClockOffsets::AddCollective(const std::vector<std::pair<int, double>>& node_ends) {
  if (node_ends.size() < 2) return;
  auto anchor = std::min_element(node_ends.begin(), node_ends.end());
  for (const auto& [node, end] : node_ends) {
    if (node == anchor->first) continue;
    int a = std::min(node, anchor->first), b = std::max(node, anchor->first);
    double end_a = a == node ? end : anchor->second, end_b = b == node ? end : anchor->second;
    std::deque<double>& d = diffs_[{a, b}];
    d.push_back(end_b - end_a);
    if (d.size() > kKept) d.pop_front();
  }
}

void ClockOffsets::Update(int reference, int node_count) {
  offset_.assign(node_count, 0);
  known_.assign(node_count, 0);
  if (reference < 0 || reference >= node_count) return;
  // Adjacency with each pair's median difference (b's clock minus a's).
  std::vector<std::vector<std::pair<int, double>>> next(node_count);
  std::vector<double> scratch;
  for (const auto& [pair, d] : diffs_) {
    if (d.size() < kMinSamples || pair.second >= node_count) continue;
    scratch.assign(d.begin(), d.end());
    double median = MedianOf(scratch);
    next[pair.first].emplace_back(pair.second, median);
    next[pair.second].emplace_back(pair.first, -median);
  }
  std::deque<int> queue = {reference};
  known_[reference] = 1;
  while (!queue.empty()) {
    int a = queue.front();
    queue.pop_front();
    for (auto [b, d] : next[a]) {
      if (known_[b]) continue;
      known_[b] = 1;
      offset_[b] = offset_[a] + d;
      queue.push_back(b);
    }
  }
}

}  // namespace xtimer::slowdown
