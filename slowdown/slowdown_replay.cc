#include "slowdown/slowdown_replay.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <unordered_map>

#include "common/stacks/rank_set.h"

#include "slowdown/clock_offsets.h"
#include "slowdown/robust_stats.h"

namespace xtimer {
namespace {

using slowdown::StepRecord;

constexpr size_t kOffsetRecords = 20000;   // records the clock offsets are learned from
constexpr size_t kRankClockRecords = 256;  // of each rank at most (and at least 16) for its own clock

std::string Span(double seconds) {
  const double a = std::abs(seconds);
  char buf[64];
  if (a >= 2 * 86400) std::snprintf(buf, sizeof buf, "%.1f days", a / 86400);
  else std::snprintf(buf, sizeof buf, "%.1f hours", a / 3600);
  return std::string(buf) + (seconds > 0 ? " ahead of" : " behind");
}

// Clocks beyond kClockWarnSeconds apart: each rank's own clock against its node's other ranks'
// (most of them agree; on an even split, the side nearer the lowest rank's clock) and each node's
// against the lowest rank's node, from the end times of the collectives of each rank's first
// records (all members end a collective at nearly the same moment). Such a rank's or node's times
// are moved onto the lowest rank's node's clock here, each named in one line; offsets below it are
// CorrectedEnds' to take out, as before. A rank that no collective links to the others and whose
// steps are that far from the others' is named and left on its own clock.
std::vector<std::string> AlignFarClocks(std::vector<StepRecord>* records) {
  std::vector<std::string> lines;
  std::map<int32_t, int> rank_index;  // ranks ascending: the lowest is 0, the reference
  for (const StepRecord& r : *records) rank_index.try_emplace(r.rank, 0);
  if (rank_index.size() < 2) return lines;
  std::vector<int32_t> rank_of;
  for (auto& [rank, i] : rank_index) i = static_cast<int>(rank_of.size()), rank_of.push_back(rank);
  const size_t n = rank_of.size();
  const size_t per_rank = std::clamp<size_t>(kOffsetRecords / n, 16, kRankClockRecords);

  // Each rank's node (its first record's) and sampled records' end times.
  std::vector<std::string> node_of(n);
  std::vector<std::vector<double>> ends_of(n);
  std::map<std::pair<std::string, int64_t>, std::vector<std::pair<int, double>>> ends;
  std::vector<size_t> taken(n, 0);
  for (const StepRecord& r : *records) {
    const int i = rank_index[r.rank];
    if (taken[i]++ >= per_rank) continue;
    if (taken[i] == 1) node_of[i] = r.node;
    ends_of[i].push_back(r.t_end);
    for (const slowdown::CollTime& c : r.colls) ends[{c.comm, c.seq}].emplace_back(i, c.end);
  }
  slowdown::ClockOffsets offsets;
  std::vector<std::pair<int, double>> rank_ends;
  std::vector<double> mine;
  for (auto& [key, members] : ends) {
    std::sort(members.begin(), members.end());
    rank_ends.clear();
    for (size_t a = 0, b = 0; a < members.size(); a = b) {
      mine.clear();
      for (b = a; b < members.size() && members[b].first == members[a].first; ++b) mine.push_back(members[b].second);
      rank_ends.emplace_back(members[a].first, slowdown::MedianOf(mine));
    }
    offsets.AddCollective(rank_ends);
  }
  offsets.Update(0, static_cast<int>(n));

  // Each node's clock: the largest group of its ranks' clocks within the limit of each other.
  std::map<std::string, std::vector<int>> node_ranks;
  for (size_t i = 0; i < n; ++i) node_ranks[node_of[i]].push_back(static_cast<int>(i));
  std::map<std::string, double> node_clock;
  for (auto& [node, members] : node_ranks) {
    std::vector<double> v;
    for (int i : members)
      if (offsets.Known(i)) v.push_back(offsets.Offset(i));
    if (v.empty()) continue;
    std::sort(v.begin(), v.end());
    size_t best_a = 0, best_b = 0;
    for (size_t a = 0, b = 0; a < v.size(); a = b) {
      for (b = a + 1; b < v.size() && v[b] - v[b - 1] <= kClockWarnSeconds; ++b) {
      }
      auto nearest = [&](size_t x, size_t y) {
        double d = std::numeric_limits<double>::infinity();
        for (size_t k = x; k < y; ++k) d = std::min(d, std::abs(v[k]));
        return d;
      };
      if (best_b == 0 || b - a > best_b - best_a ||
          (b - a == best_b - best_a && nearest(a, b) < nearest(best_a, best_b)))
        best_a = a, best_b = b;
    }
    std::vector<double> group(v.begin() + best_a, v.begin() + best_b);
    node_clock[node] = slowdown::MedianOf(group);
  }
  const std::string& reference_node = node_of[0];
  const double reference = node_clock.contains(reference_node) ? node_clock[reference_node] : 0;

  std::vector<double> shift(n, 0);
  bool any = false;
  for (auto& [node, members] : node_ranks) {
    auto clock = node_clock.find(node);
    if (clock == node_clock.end()) continue;
    const double node_off = clock->second - reference;
    std::vector<int32_t> moved;
    for (int i : members) {
      if (!offsets.Known(i)) continue;
      const double own = offsets.Offset(i) - clock->second;
      if (std::abs(own) > kClockWarnSeconds) {
        shift[i] += own;
        lines.push_back("the clock of rank " + std::to_string(rank_of[i]) + " (node " + node + ") is " + Span(own) +
                        " its node's other ranks' (from the collectives they share); its times are moved by that "
                        "much and it is judged with the others");
      }
      if (std::abs(node_off) > kClockWarnSeconds) shift[i] += node_off, moved.push_back(rank_of[i]);
    }
    if (!moved.empty())
      lines.push_back("the clock of node " + node + " (rank" + (moved.size() == 1 ? " " : "s ") + FoldRanks(moved) +
                      ") is " + Span(node_off) + " node " + reference_node + "'s (rank " + std::to_string(rank_of[0]) +
                      "'s, from the collectives they share); its times are moved by that much");
  }
  for (size_t i = 0; i < n; ++i) any |= shift[i] != 0;

  // Ranks no collective links to the reference: named when their steps are far from its.
  std::vector<double> ref_ends;
  for (size_t i = 0; i < n; ++i)
    if (offsets.Known(static_cast<int>(i)) && std::abs(shift[i]) == 0)
      ref_ends.insert(ref_ends.end(), ends_of[i].begin(), ends_of[i].end());
  if (!ref_ends.empty()) {
    const double ref_t = slowdown::MedianOf(ref_ends);
    for (size_t i = 0; i < n; ++i) {
      if (offsets.Known(static_cast<int>(i)) || ends_of[i].empty()) continue;
      const double apart = slowdown::MedianOf(ends_of[i]) - ref_t;
      if (std::abs(apart) > kClockWarnSeconds)
        lines.push_back("the steps of rank " + std::to_string(rank_of[i]) + " (node " + node_of[i] + ") are " +
                        Span(apart) +
                        " the others' and no collective they share tells its clock; judged on its "
                        "own clock, apart from them");
    }
  }
  if (!any) return lines;
  for (StepRecord& r : *records) {
    const double d = shift[rank_index[r.rank]];
    if (d == 0) continue;
    r.t_begin -= d;
    r.t_end -= d;
    for (slowdown::CollTime& c : r.colls) {
      c.call -= d;
      c.start -= d;
      c.end -= d;
    }
  }
  return lines;
}

// Each record's end on the reference clock (the lowest rank's node), from the collectives of the
// first kOffsetRecords records (by their own end times).
std::vector<double> CorrectedEnds(const std::vector<StepRecord>& records) {
  std::unordered_map<std::string, int> node_ids;
  std::vector<int> node(records.size());
  int reference = -1, lowest = std::numeric_limits<int>::max();
  for (size_t i = 0; i < records.size(); ++i) {
    node[i] = node_ids.try_emplace(records[i].node, static_cast<int>(node_ids.size())).first->second;
    if (records[i].rank < lowest) lowest = records[i].rank, reference = node[i];
  }
  std::vector<size_t> order(records.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return records[a].t_end < records[b].t_end; });
  std::map<std::pair<std::string, int64_t>, std::map<int, std::vector<double>>> ends;
  for (size_t k = 0; k < order.size() && k < kOffsetRecords; ++k) {
    const StepRecord& r = records[order[k]];
    for (const slowdown::CollTime& c : r.colls) ends[{c.comm, c.seq}][node[order[k]]].push_back(c.end);
  }
  slowdown::ClockOffsets offsets;
  std::vector<std::pair<int, double>> node_ends;
  for (auto& [key, by_node] : ends) {
    if (by_node.size() < 2) continue;
    node_ends.clear();
    for (auto& [n, v] : by_node) node_ends.emplace_back(n, slowdown::MedianOf(v));
    offsets.AddCollective(node_ends);
  }
  offsets.Update(reference, static_cast<int>(node_ids.size()));
  std::vector<double> out(records.size());
  for (size_t i = 0; i < records.size(); ++i) out[i] = records[i].t_end - offsets.Offset(node[i]);
  return out;
}

}  // namespace

SlowdownReplay ReplaySlowdown(std::vector<StepRecord> records, const slowdown::JudgeOptions& options,
                              const std::function<void(size_t, size_t)>& progress) {
  SlowdownReplay out;
  out.records = records.size();
  if (records.empty()) return out;
  out.clock_lines = AlignFarClocks(&records);
  std::vector<double> when = CorrectedEnds(records);
  std::vector<size_t> order(records.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return when[a] < when[b]; });
  out.start = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < records.size(); ++i) {
    out.node_of[records[i].rank] = records[i].node;
    out.start = std::min(out.start, when[i] - (records[i].t_end - records[i].t_begin));
  }

  slowdown::Judge judge(options);
  std::map<std::string, size_t> open;         // key -> its episode
  std::map<std::string, double> cost_so_far;  // of open episodes, integrated here
  double last_t = std::numeric_limits<double>::quiet_NaN();
  auto evaluate = [&](double now) {
    slowdown::Verdict v = judge.Evaluate(now);
    for (const slowdown::SlowEvent& e : v.events) {
      out.lines.push_back(e.line);
      const std::string& key = e.finding.key;
      if (e.started) {
        open[key] = out.episodes.size();
        cost_so_far[key] = e.finding.cost * std::max(0.0, v.window_end - e.finding.since);
        out.episodes.push_back(SlowdownEpisode{e.finding, e.finding.since, v.window_end, 0, false});
      } else if (auto it = open.find(key); it != open.end()) {
        SlowdownEpisode& ep = out.episodes[it->second];
        ep.finding = e.finding;
        ep.until = ep.since + e.duration_s;
        ep.cost_s = e.cost_s;
        ep.ended = true;
        open.erase(it);
        cost_so_far.erase(key);
      }
    }
    if (v.judged && (out.t.empty() || v.window_end > out.t.back())) {
      const size_t i = out.t.size();
      for (const slowdown::Finding& f : v.slow)
        if (auto it = open.find(f.key); it != open.end()) {
          SlowdownEpisode& ep = out.episodes[it->second];
          if (!std::isnan(last_t)) cost_so_far[f.key] += f.cost * (v.window_end - last_t);
          ep.finding = f;
          ep.until = v.window_end;
          ep.cost_s = cost_so_far[f.key];
        }
      last_t = v.window_end;
      out.t.push_back(v.window_end);
      out.job_step.push_back(v.step_time_s);
      out.baseline.push_back(v.baseline_step_time_s);
      for (const slowdown::RankStatus& r : v.ranks) {
        SlowdownReplay::Series& s = out.ranks[r.rank];
        s.step.resize(i, std::numeric_limits<double>::quiet_NaN());
        s.score.resize(i, std::numeric_limits<double>::quiet_NaN());
        s.step.push_back(r.step_time_s);
        s.score.push_back(r.score);
      }
    }
    out.last = std::move(v);
  };

  double next_eval = when[order.front()] + options.interval_s;
  for (size_t k = 0; k < order.size(); ++k) {
    const double now = when[order[k]];
    while (now >= next_eval) {
      // A judge that holds no rank (all silent for long) stays as it is until the next record:
      // skip the empty time to the last evaluation before it rather than tick through it.
      if (judge.ranks() == 0) next_eval += std::floor((now - next_eval) / options.interval_s) * options.interval_s;
      evaluate(next_eval);
      next_eval += options.interval_s;
    }
    judge.Add(std::move(records[order[k]]), now);
    if (progress && (k % 4096 == 0 || k + 1 == order.size())) progress(k + 1, order.size());
  }
  // The last records' collectives are complete; a few more evaluations judge the last window.
  for (int i = 0; i < 3; ++i) {
    evaluate(next_eval);
    next_eval += options.interval_s;
  }
  for (auto& [rank, s] : out.ranks) {
    s.step.resize(out.t.size(), std::numeric_limits<double>::quiet_NaN());
    s.score.resize(out.t.size(), std::numeric_limits<double>::quiet_NaN());
  }
  return out;
}

}  // namespace xtimer
