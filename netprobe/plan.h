// Which pairs of nodes test each other, round by round. Pure logic; no sockets.
//
// A round is a list of steps; the pairs of one step are disjoint and run in parallel, the steps
// of a round run one after the other.
//  - Neighbour round (round 1): 0-1, 2-3, ... over the present nodes; with an odd count the last
//    node joins the last pair: a second step tests it with the first node of that pair.
//  - All-pairs: every pair once, in n-1 rounds of n/2 disjoint pairs (the circle method; an odd
//    count adds a bye, so n rounds with one node idle in each).
//  - Follow-up: each undecided node gets one new partner that is ok on the network and that it has
//    not tested with yet, the least loaded and then the fastest such node first; a slow link
//    between two ok nodes (Verdict::recheck) is tested again. Tests go into the first step where
//    both of their nodes are free.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "netprobe/judge.h"

namespace xtimer::netprobe {

using Pair = std::pair<int, int>;  // first < second
using Step = std::vector<Pair>;

struct RoundPlan {
  std::string kind;  // "neighbours", "all-pairs", "follow-up"
  std::vector<Step> steps;
  bool base = true;  // neighbours and all-pairs rounds are the base the median is taken from
  size_t tests() const;
};

// `present`: ranks that joined, in any order. Fewer than two: an empty round (no steps).
RoundPlan NeighbourRound(std::vector<int> present);
std::vector<RoundPlan> AllPairsRounds(std::vector<int> present);

// The next round for the undecided nodes and links of `verdict`, or nullopt when there is
// nothing to decide or nobody left to pair them with.
std::optional<RoundPlan> FollowUpRound(const Verdict& verdict, const std::vector<TestResult>& tests);

}  // namespace xtimer::netprobe
