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
  if (verdict.undecided.empty()) return std::nullopt;
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

  std::map<int, int> load;  // partner -> undecided nodes given to it in this round
  std::vector<Step> steps;
  std::vector<int> undecided = verdict.undecided;
  std::sort(undecided.begin(), undecided.end());
  for (int u : undecided) {
    int chosen = -1;
    for (int p : partners) {
      if (p == u || tested.count(Ordered(u, p)) > 0) continue;
      if (chosen < 0 || load[p] < load[chosen]) chosen = p;  // least loaded, then fastest
    }
    if (chosen < 0) continue;  // nobody left to pair it with
    size_t step = static_cast<size_t>(load[chosen]++);
    if (steps.size() <= step) steps.resize(step + 1);
    steps[step].push_back(Ordered(u, chosen));
  }
  if (steps.empty()) return std::nullopt;
  for (Step& s : steps) std::sort(s.begin(), s.end());
  return RoundPlan{"follow-up", steps, false};
}

}  // namespace xtimer::netprobe
