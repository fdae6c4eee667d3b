#include "slowdown/features.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

#include "slowdown/robust_stats.h"

namespace xtimer::slowdown {

bool FinalizeStep(StepEntry* e) {
  if (e->final) return true;
  for (const auto& [c, i] : e->colls)
    if (!c->final) return false;
  e->lateness = e->wait = e->transfer = 0;
  for (const auto& [c, i] : e->colls) {
    if (!c->timed) continue;
    e->lateness += c->members[i].lateness;
    e->wait += c->members[i].wait;
    e->transfer += c->transfer;
  }
  e->final = true;
  return true;
}

std::vector<const StepEntry*> WindowSteps(const RankSteps& r, double offset, const WindowSpec& spec) {
  std::vector<const StepEntry*> all;
  for (const StepEntry& e : r.steps)
    if (e.final && !e.warmup && e.t_end - offset <= spec.end) all.push_back(&e);
  std::stable_sort(all.begin(), all.end(), [](const StepEntry* a, const StepEntry* b) { return a->t_end < b->t_end; });
  size_t first = all.size();
  while (first > 0 && all[first - 1]->t_end - offset > spec.end - spec.length) --first;
  size_t keep = std::max<size_t>(all.size() - first, static_cast<size_t>(std::max(spec.min_steps, 0)));
  if (keep < all.size()) all.erase(all.begin(), all.end() - keep);
  return all;
}

namespace {

template <typename F>
double Trimmed(const std::vector<const StepEntry*>& steps, F f) {
  std::vector<double> v;
  v.reserve(steps.size());
  for (const StepEntry* e : steps) v.push_back(f(*e));
  return TrimmedMeanOf(v);
}

struct CommGroup {
  std::vector<double> transfers;
  const Collective* fullest = nullptr;
  int32_t expected = 0;
};

}  // namespace

JobWindow Summarize(const std::vector<const RankSteps*>& ranks, const ClockOffsets& offsets, const WindowSpec& spec) {
  JobWindow w;
  w.end = spec.end;
  std::map<std::tuple<uint32_t, uint32_t, uint64_t>, CommGroup> groups;
  std::unordered_map<int32_t, int> steps_of;
  for (const RankSteps* r : ranks) {
    const double offset = offsets.Offset(r->node);
    std::vector<const StepEntry*> steps = WindowSteps(*r, offset, spec);
    if (static_cast<int>(steps.size()) < spec.min_steps || steps.empty()) continue;
    RankWindow rw;
    rw.rank = r->rank;
    rw.node = r->node;
    rw.steps = static_cast<int>(steps.size());
    rw.first = steps.front()->t_begin - offset;
    rw.last = steps.back()->t_end - offset;
    std::vector<double> v;
    for (const StepEntry* e : steps) v.push_back(e->step_s);
    rw.step_s = MedianOf(v);
    size_t late = 0;
    for (const StepEntry* e : steps) late += e->lateness >= kLateStep * rw.step_s;
    rw.late_share = static_cast<double>(late) / static_cast<double>(steps.size());
    // A step's waits can sum past the step: with CUDA's asynchronous collectives a wait that began
    // in the step before is summed into this one (real torch: DDP's buffer broadcast completes on
    // its root without the peer, so two ranks' step windows sit half a step apart). No rank works
    // less than nothing; unclamped, the waiting rank's self time went negative and doubled its
    // peer's extra time, so a GC pause was named `host`.
    rw.self_s = Trimmed(steps, [](const StepEntry& e) { return std::max(0.0, e.step_s - e.wait); });
    rw.lateness_s = Trimmed(steps, [](const StepEntry& e) { return e.lateness; });
    rw.wait_s = Trimmed(steps, [](const StepEntry& e) { return e.wait; });
    rw.transfer_s = Trimmed(steps, [](const StepEntry& e) { return e.transfer; });
    rw.compute_s = Trimmed(steps, [](const StepEntry& e) { return e.compute_s; });
    rw.gc_s = Trimmed(steps, [](const StepEntry& e) { return e.gc_s; });
    rw.data_s = Trimmed(steps, [](const StepEntry& e) { return e.data_s; });
    rw.idle_s = Trimmed(steps, [](const StepEntry& e) { return e.idle_s; });
    std::map<uint32_t, SigTime> sigs;
    for (const StepEntry* e : steps) {
      for (const SigTime& k : e->kernels) {
        SigTime& t = sigs[k.sig];
        t.sig = k.sig;
        t.n += k.n;
        t.s += k.s;
      }
      for (const auto& [c, i] : e->colls) {
        if (c->visited == spec.stamp) continue;
        c->visited = spec.stamp;
        if (!c->timed) continue;
        CommGroup& g = groups[{c->comm, c->op, c->bytes}];
        g.transfers.push_back(c->transfer);
        g.expected = std::max(g.expected, c->expected);
        if (g.fullest == nullptr || c->members.size() > g.fullest->members.size()) g.fullest = c;
      }
    }
    for (auto& [id, t] : sigs) rw.sigs.push_back(t);
    steps_of[rw.rank] = rw.steps;
    w.ranks.push_back(std::move(rw));
  }
  std::sort(w.ranks.begin(), w.ranks.end(), [](const RankWindow& a, const RankWindow& b) { return a.rank < b.rank; });
  if (w.ranks.empty()) return w;

  auto median_of = [&](double RankWindow::*field) {
    std::vector<double> v;
    for (const RankWindow& r : w.ranks) v.push_back(r.*field);
    return MedianOf(v);
  };
  w.step_s = median_of(&RankWindow::step_s);
  w.self_s = median_of(&RankWindow::self_s);
  w.compute_s = median_of(&RankWindow::compute_s);
  w.transfer_s = median_of(&RankWindow::transfer_s);
  w.gc_s = median_of(&RankWindow::gc_s);
  w.data_s = median_of(&RankWindow::data_s);
  w.idle_s = median_of(&RankWindow::idle_s);
  std::vector<double> counts;
  for (const RankWindow& r : w.ranks) counts.push_back(r.steps);
  const double typical_steps = std::max(1.0, MedianOf(counts));

  for (auto& [key, g] : groups) {
    CommWindow cw;
    std::tie(cw.comm, cw.op, cw.bytes) = key;
    cw.expected = g.expected;
    for (const CollMember& m : g.fullest->members) {
      cw.ranks.push_back(m.rank);
      cw.nodes.push_back(m.node);
    }
    std::sort(cw.ranks.begin(), cw.ranks.end());
    std::sort(cw.nodes.begin(), cw.nodes.end());
    cw.nodes.erase(std::unique(cw.nodes.begin(), cw.nodes.end()), cw.nodes.end());
    cw.count = static_cast<int>(g.transfers.size());
    cw.transfer_s = MedianOf(g.transfers);
    cw.mean_transfer_s = TrimmedMeanOf(g.transfers);
    auto it = steps_of.find(cw.ranks.front());
    cw.per_step = cw.count / (it != steps_of.end() ? static_cast<double>(it->second) : typical_steps);
    w.comms.push_back(std::move(cw));
  }
  return w;
}

}  // namespace xtimer::slowdown
