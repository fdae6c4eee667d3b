#include "viewer/slowdown_replay.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <unordered_map>

#include "common/slowdown/clock_offsets.h"
#include "common/slowdown/robust_stats.h"

namespace xtimer {
namespace {

using slowdown::StepRecord;

constexpr size_t kOffsetRecords = 20000;  // records the clock offsets are learned from

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
