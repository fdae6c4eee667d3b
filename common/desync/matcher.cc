#include "common/desync/matcher.h"

#include <algorithm>

#include "common/stacks/rank_set.h"

namespace xtimer::desync {

std::string Mismatch::Line() const {
  std::string out;
  // The odd ones out first, the majority last: "rank 2 called ...; ranks 0-1/3 called ...".
  for (size_t i = 1; i <= sides.size(); ++i) {
    const Side& s = sides[i % sides.size()];
    if (!out.empty()) out += "; ";
    out += (s.ranks.size() == 1 ? "rank " : "ranks ") + FoldRanks(s.ranks) + " called " + Describe(s.call);
  }
  return out;
}

void Matcher::Add(int32_t rank, const Fingerprint& call, int64_t now_ms) {
  if (call.comm.empty() || call.seq == 0) return;
  auto it = comms_.find(call.comm);
  if (it == comms_.end()) {
    if (comms_.size() >= options_.max_comms) {  // forget the communicator least recently used
      auto oldest = std::min_element(comms_.begin(), comms_.end(),
                                     [](const auto& a, const auto& b) { return a.second.touched < b.second.touched; });
      comms_.erase(oldest);
    }
    it = comms_.emplace(call.comm, Comm{}).first;
  }
  Comm& c = it->second;
  c.touched = ++clock_;
  if (c.reported) return;
  if (call.comm_size > 0) c.size = call.comm_size;
  if (call.seq + options_.window <= c.newest) return;  // far behind: nothing left to compare with
  c.newest = std::max(c.newest, call.seq);
  Calls& calls = c.seqs[call.seq];
  calls.by_rank[rank] = call;
  if (calls.differ_since_ms < 0) {
    for (const auto& [r, other] : calls.by_rank)
      if (!other.SameCall(call)) {
        calls.differ_since_ms = now_ms;
        break;
      }
  }
  if (calls.differ_since_ms < 0 && c.size > 0 && calls.by_rank.size() >= size_t(c.size)) {
    c.seqs.erase(call.seq);  // every member agreed
  } else if (calls.differ_since_ms >= 0 && c.size > 0 && calls.by_rank.size() >= size_t(c.size)) {
    ready_.push_back(Decide(call.comm, c, call.seq, calls));
    ready_.back().complete = true;
    c.reported = true;
    c.seqs.clear();
  }
  while (!c.seqs.empty() && c.seqs.begin()->first + options_.window <= c.newest) c.seqs.erase(c.seqs.begin());
}

Mismatch Matcher::Decide(const std::string& comm_id, const Comm& comm, uint64_t seq, const Calls& calls) const {
  Mismatch m;
  m.comm = comm_id;
  m.comm_size = comm.size;
  m.seq = seq;
  for (const auto& [rank, call] : calls.by_rank) {  // ascending ranks
    auto side = std::find_if(m.sides.begin(), m.sides.end(), [&](const Side& s) { return s.call.SameCall(call); });
    if (side == m.sides.end()) {
      m.sides.push_back(Side{{}, call});
      side = m.sides.end() - 1;
    }
    side->ranks.push_back(rank);
    if (side->call.site.empty()) side->call.site = call.site;
  }
  // The largest side first; among equals the one with the lowest rank (already in that order).
  std::stable_sort(m.sides.begin(), m.sides.end(),
                   [](const Side& a, const Side& b) { return a.ranks.size() > b.ranks.size(); });
  for (size_t i = 1; i < m.sides.size(); ++i)
    m.suspects.insert(m.suspects.end(), m.sides[i].ranks.begin(), m.sides[i].ranks.end());
  std::sort(m.suspects.begin(), m.suspects.end());
  return m;
}

std::vector<Mismatch> Matcher::Take(int64_t now_ms) {
  for (auto& [id, c] : comms_) {
    if (c.reported) continue;
    for (auto& [seq, calls] : c.seqs) {
      if (calls.differ_since_ms >= 0 && now_ms - calls.differ_since_ms >= options_.grace_ms) {
        ready_.push_back(Decide(id, c, seq, calls));
        c.reported = true;
        c.seqs.clear();
        break;
      }
    }
  }
  std::vector<Mismatch> out;
  out.swap(ready_);
  return out;
}

size_t Matcher::pending() const {
  size_t n = 0;
  for (const auto& [id, c] : comms_) n += c.seqs.size();
  return n;
}

}  // namespace xtimer::desync
