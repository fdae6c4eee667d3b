#include "slowdown/collectives.h"

#include <algorithm>
#include <map>

#include "slowdown/robust_stats.h"

namespace xtimer::slowdown {

Collective* CollectiveTable::Add(uint32_t comm, int64_t seq, uint32_t op, uint64_t bytes, int32_t ranks,
                                 const CollMember& member, double now, uint32_t* index) {
  auto [it, fresh] = table_.try_emplace(Key{comm, seq});
  Collective& c = it->second;
  if (fresh) {
    c.comm = comm;
    c.seq = seq;
    c.op = op;
    c.bytes = bytes;
    c.first_seen = now;
    pending_.push_back(&c);
  }
  c.expected = std::max(c.expected, ranks);
  if (c.final || static_cast<int32_t>(c.members.size()) >= c.expected) return nullptr;
  for (const CollMember& m : c.members)
    if (m.rank == member.rank) return nullptr;
  *index = static_cast<uint32_t>(c.members.size());
  c.members.push_back(member);
  ++c.refs;
  return &c;
}

void CollectiveTable::Judge(Collective& c, const ClockOffsets& offsets) {
  c.final = true;
  c.timed = c.members.size() >= 2;
  for (const CollMember& m : c.members) c.timed &= offsets.Known(m.node);
  if (!c.timed) return;
  std::vector<double> starts, ends;
  for (const CollMember& m : c.members) {
    starts.push_back(m.start - offsets.Offset(m.node));
    ends.push_back(m.end - offsets.Offset(m.node));
  }
  double last = *std::max_element(starts.begin(), starts.end());
  double first = *std::min_element(starts.begin(), starts.end());
  std::vector<double> s = starts;
  double reference = starts.size() == 2 ? first : MedianOf(s);
  c.end = MedianOf(ends);
  c.transfer = std::max(0.0, c.end - last);
  for (size_t i = 0; i < c.members.size(); ++i) {
    c.members[i].lateness = std::max(0.0, starts[i] - reference);
    c.members[i].wait = std::max(0.0, last - starts[i]);
  }
}

void CollectiveTable::Finalize(double now, double grace, ClockOffsets* offsets, int reference, int node_count) {
  std::vector<Collective*> ready;
  std::vector<Collective*> still;
  for (Collective* c : pending_) {
    bool complete = static_cast<int32_t>(c->members.size()) >= c->expected;
    if (complete || now - c->first_seen >= grace) ready.push_back(c);
    else still.push_back(c);
  }
  pending_.swap(still);
  // Complete collectives over several nodes teach the offsets before any is judged.
  std::map<int, std::vector<double>> by_node;
  std::vector<std::pair<int, double>> node_ends;
  for (Collective* c : ready) {
    if (static_cast<int32_t>(c->members.size()) < c->expected) continue;
    by_node.clear();
    for (const CollMember& m : c->members) by_node[m.node].push_back(m.end);
    if (by_node.size() < 2) continue;
    node_ends.clear();
    for (auto& [node, ends] : by_node) node_ends.emplace_back(node, MedianOf(ends));
    offsets->AddCollective(node_ends);
  }
  offsets->Update(reference, node_count);
  for (Collective* c : ready) Judge(*c, *offsets);
}

void CollectiveTable::Release(Collective* c) {
  if (--c->refs > 0) return;
  if (!c->final) std::erase(pending_, c);
  table_.erase(Key{c->comm, c->seq});
}

}  // namespace xtimer::slowdown
