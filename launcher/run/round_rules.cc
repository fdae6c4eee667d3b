#include "launcher/run/round_rules.h"

#include <algorithm>

namespace xtimer::run {
namespace {

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

bool AllIn(const std::vector<std::string>& some, const std::vector<std::string>& all) {
  return std::all_of(some.begin(), some.end(), [&](const std::string& s) { return Contains(all, s); });
}

}  // namespace

int RoundSize(int joined, const RoundLimits& l) {
  const int unit = std::max(1, l.node_unit);
  const int n = std::min(joined, l.max_nodes) / unit * unit;
  return n >= l.min_nodes && n > 0 ? n : 0;
}

std::vector<std::string> AssignGroupRanks(std::vector<Candidate> c, int size) {
  std::stable_sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) {
    if ((a.prev_rank < 0) != (b.prev_rank < 0)) return a.prev_rank >= 0;
    if (a.prev_rank != b.prev_rank) return a.prev_rank < b.prev_rank;
    return a.arrived < b.arrived;
  });
  if (size < 0) size = 0;
  if (c.size() > static_cast<size_t>(size)) c.resize(size);
  const size_t n = c.size();
  std::vector<std::string> slots(n);
  std::vector<bool> placed(n, false);
  for (size_t k = 0; k < n; ++k) {
    const int p = c[k].prev_rank;
    if (p >= 0 && static_cast<size_t>(p) < n && slots[p].empty()) {
      slots[p] = c[k].id;
      placed[k] = true;
    }
  }
  size_t next = 0;
  for (size_t k = 0; k < n; ++k) {
    if (placed[k]) continue;
    while (!slots[next].empty()) ++next;
    slots[next] = c[k].id;
  }
  return slots;
}

const char* Describe(CloseReason r) {
  switch (r) {
    case CloseReason::kNotYet: return "not yet";
    case CloseReason::kFull: return "the most nodes it can take joined";
    case CloseReason::kExpectedIn: return "every node the network check kept joined";
    case CloseReason::kEveryoneIn: return "every node of the last round still alive joined and no other node waits";
    case CloseReason::kLastCallOver: return "last_call_timeout passed";
  }
  return "?";
}

CloseReason ShouldClose(const OpenRound& r, const RoundLimits& l) {
  const int size = RoundSize(static_cast<int>(r.joined.size()), l);
  if (size == 0) return CloseReason::kNotYet;
  if (size == RoundSize(l.max_nodes, l)) return CloseReason::kFull;
  if (!r.expect.empty() && AllIn(r.expect, r.joined)) return CloseReason::kExpectedIn;
  const bool survivor_in =
      std::any_of(r.survivors.begin(), r.survivors.end(), [&](const std::string& s) { return Contains(r.joined, s); });
  if (r.has_previous && survivor_in && AllIn(r.survivors, r.joined) && AllIn(r.waiting, r.joined))
    return CloseReason::kEveryoneIn;
  if (r.last_call_passed) return CloseReason::kLastCallOver;
  return CloseReason::kNotYet;
}

bool WaitingNodesFit(int running, int waiting, const RoundLimits& l) {
  return waiting > 0 && RoundSize(running + waiting, l) > running;
}

bool GoesOnWithout(int running, int waiting, const RoundLimits& l) {
  return running >= 1 && RoundSize(running - 1 + waiting, l) > 0;
}

}  // namespace xtimer::run
