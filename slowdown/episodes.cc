#include "slowdown/episodes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/clock.h"
#include "common/stacks/rank_set.h"

namespace xtimer::slowdown {
namespace {

std::string Percent(double f) { return std::to_string(static_cast<int>(std::lround(f * 100))) + "%"; }

std::string Time(double unix_s) { return IsoUtc(static_cast<uint64_t>(std::max(0.0, unix_s) * 1e9)); }

}  // namespace

std::string Who(const Finding& f) {
  switch (f.scope) {
    case Scope::kRank: return "rank " + std::to_string(f.rank) + " (node " + f.node + ")";
    case Scope::kNode: return "node " + f.node + " (ranks " + FoldRanks(f.ranks) + ")";
    case Scope::kLink: return "the link between nodes " + f.node + " and " + f.peer;
    case Scope::kJob: break;
  }
  return "the whole job";
}

std::string StartLine(const Finding& f) {
  char score[32];
  std::snprintf(score, sizeof score, "%.2f", f.score);
  return "slowdown: " + Who(f) + " is slow since " + Time(f.since) + ": " + CauseName(f.cause) + ", " + f.detail +
         "; score " + score + ", it costs " + Percent(f.cost) + " of the job's step time";
}

std::string EndLine(const Finding& f, double duration_s, double cost_s) {
  char buf[128];
  std::snprintf(buf, sizeof buf, ", after %.0f s; it cost about %.1f s of the job's time", duration_s, cost_s);
  std::string line = "slowdown over: " + Who(f) + ", " + CauseName(f.cause) + buf;
  if (duration_s > 0) line += " (" + Percent(cost_s / duration_s) + " of its step time)";
  return line;
}

std::vector<Finding> Episodes::Update(const std::vector<Candidate>& candidates, double now,
                                      std::vector<SlowEvent>* events) {
  // `now`: the window's end, on the job's (reference) clock.
  std::map<std::string, const Candidate*> seen;
  for (const Candidate& c : candidates) seen.try_emplace(c.finding.key, &c);  // the costliest per key
  for (auto& [key, c] : seen) {
    State& s = states_[key];
    if (s.active) {
      s.cost_s += c->finding.cost * std::max(0.0, now - s.last_seen);
      double since = s.last.since;
      s.last = c->finding;
      s.last.since = since;
      s.misses = 0;
      s.last_seen = now;
      continue;
    }
    s.streak = c->strong ? s.streak + 1 : 0;
    s.last = c->finding;
    s.last_seen = now;
    if (s.streak >= start_evals_) {
      s.active = true;
      s.cost_s = c->finding.cost * std::max(0.0, now - c->finding.since);
      events->push_back(SlowEvent{true, s.last, 0, 0, StartLine(s.last)});
    }
  }
  for (auto it = states_.begin(); it != states_.end();) {
    State& s = it->second;
    if (seen.contains(it->first)) {
      ++it;
      continue;
    }
    if (s.active && ++s.misses < end_evals_) {
      ++it;
      continue;
    }
    if (s.active) {
      double duration = std::max(0.0, s.last_seen - s.last.since);
      events->push_back(SlowEvent{false, s.last, duration, s.cost_s, EndLine(s.last, duration, s.cost_s)});
    }
    it = states_.erase(it);
  }
  std::vector<Finding> active;
  for (auto& [key, s] : states_)
    if (s.active) active.push_back(s.last);
  std::stable_sort(active.begin(), active.end(), [](const Finding& a, const Finding& b) { return a.cost > b.cost; });
  return active;
}

}  // namespace xtimer::slowdown
