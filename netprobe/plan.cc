#include "netprobe/plan.h"

#include <algorithm>
#include <map>
#include <set>

namespace xtimer::netprobe {
namespace {

Pair Ordered(int a, int b) { return a < b ? Pair{a, b} : Pair{b, a}; }

void Normalise(std::vector<int>* present) {
  std::sort(present->begin(), present->end());
  present->erase(std::unique(present->begin(), present->end()), present->end());
}

}  // namespace

size_t RoundPlan::tests() const {
  size_t n = 0;
  for (const Step& s : steps) n += s.size();
  return n;
}

RoundPlan NeighbourRound(std::vector<int> present) {
  Normalise(&present);
  RoundPlan plan{"neighbours", {}, true};
  if (present.size() < 2) return plan;
  Step first;
  for (size_t i = 0; i + 1 < present.size(); i += 2) first.push_back({present[i], present[i + 1]});
  plan.steps.push_back(first);
  if (present.size() % 2 == 1) {
    // The odd node joins the last pair: it tests with that pair's first node.
    int odd = present.back();
    plan.steps.push_back({Ordered(first.back().first, odd)});
  }
  return plan;
}

std::vector<RoundPlan> AllPairsRounds(std::vector<int> present) {
  Normalise(&present);
  std::vector<RoundPlan> rounds;
  if (present.size() < 2) return rounds;
  std::vector<int> ring = present;
  if (ring.size() % 2 == 1) ring.push_back(-1);  // the bye
  const size_t m = ring.size();
  for (size_t r = 0; r + 1 < m; ++r) {
    Step step;
    for (size_t i = 0; i < m / 2; ++i) {
      int a = ring[i], b = ring[m - 1 - i];
      if (a >= 0 && b >= 0) step.push_back(Ordered(a, b));
    }
    std::sort(step.begin(), step.end());
    rounds.push_back(RoundPlan{"all-pairs", {step}, true});
    // Keep ring[0] fixed, rotate the rest by one.
    std::rotate(ring.begin() + 1, ring.end() - 1, ring.end());
  }
  return rounds;
}

std::optional<RoundPlan> FollowUpRound(const Verdict& verdict, const std::vector<TestResult>& tests) {
  if (verdict.undecided.empty() && verdict.recheck.empty()) return std::nullopt;
  std::set<Pair> tested;
  for (const TestResult& t : tests) tested.insert(Ordered(t.a, t.b));

  // Partners: nodes ok on the network (a good test), fastest first, ties by rank.
  std::vector<int> partners;
  for (const NodeVerdict& n : verdict.nodes)
    if (n.status == NodeStatus::kOk && !n.good_partners.empty()) partners.push_back(n.rank);
  std::stable_sort(partners.begin(), partners.end(), [&](int x, int y) {
    const NodeVerdict& a = verdict.nodes[x];
    const NodeVerdict& b = verdict.nodes[y];
    if (a.time_s != b.time_s) return a.time_s < b.time_s;
    return x < y;
  });

  std::vector<Pair> wanted;
  std::map<int, int> load;  // partner -> tests given to it in this round
  std::vector<int> undecided = verdict.undecided;
  std::sort(undecided.begin(), undecided.end());
  for (int u : undecided) {
    int chosen = -1;
    for (int p : partners) {
      if (p == u || tested.count(Ordered(u, p)) > 0) continue;
      if (chosen < 0 || load[p] < load[chosen]) chosen = p;  // least loaded, then fastest
    }
    if (chosen < 0) continue;  // nobody left to pair it with
    ++load[chosen];
    wanted.push_back(Ordered(u, chosen));
  }
  std::vector<Pair> recheck;
  for (const auto& [a, b] : verdict.recheck) recheck.push_back(Ordered(a, b));
  std::sort(recheck.begin(), recheck.end());
  wanted.insert(wanted.end(), recheck.begin(), recheck.end());
  if (wanted.empty()) return std::nullopt;

  // First fit: each test into the first step where both its nodes are free.
  std::vector<Step> steps;
  std::vector<std::set<int>> busy;
  for (const Pair& p : wanted) {
    size_t s = 0;
    while (s < steps.size() && (busy[s].count(p.first) > 0 || busy[s].count(p.second) > 0)) ++s;
    if (s == steps.size()) {
      steps.emplace_back();
      busy.emplace_back();
    }
    steps[s].push_back(p);
    busy[s].insert(p.first);
    busy[s].insert(p.second);
  }
  for (Step& s : steps) std::sort(s.begin(), s.end());
  return RoundPlan{"follow-up", steps, false};
}

}  // namespace xtimer::netprobe
