#include "slowdown/attribution.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <unordered_map>

#include "slowdown/robust_stats.h"

namespace xtimer::slowdown {
namespace {

std::string Fixed(double v, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string Bytes(uint64_t b) {
  if (b >= (uint64_t{1} << 30)) return Fixed(static_cast<double>(b) / (1 << 30), 1) + " GiB";
  if (b >= (uint64_t{1} << 20)) return Fixed(static_cast<double>(b) / (1 << 20), 1) + " MiB";
  if (b >= (uint64_t{1} << 10)) return Fixed(static_cast<double>(b) / (1 << 10), 1) + " KiB";
  return std::to_string(b) + " B";
}

std::string Percent(double f) { return std::to_string(static_cast<int>(std::lround(f * 100))) + "%"; }

struct CommState {
  const CommWindow* c = nullptr;
  double ref = 0;
  bool from_best = false;
  double ratio = 1, extra = 0;
  int state = -1;  // 1 slowed, 0 unslowed, -1 neither
};

const RankWindow* FindRank(const JobWindow& w, int32_t rank) {
  auto it =
      std::lower_bound(w.ranks.begin(), w.ranks.end(), rank, [](const RankWindow& r, int32_t x) { return r.rank < x; });
  return it != w.ranks.end() && it->rank == rank ? &*it : nullptr;
}

std::vector<int32_t> RanksOf(const AttributionContext& ctx, std::initializer_list<int> nodes) {
  std::vector<int32_t> out;
  for (int n : nodes) {
    auto it = ctx.node_ranks.find(n);
    if (it != ctx.node_ranks.end()) out.insert(out.end(), it->second.begin(), it->second.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The network candidate (at most one) and each rank's network extra per step.
// `explained`: each rank's transfer time per step over its communicators' references, from their
// trimmed means (as its own work is): what slower transfers explain of its own work, also while a
// network slowdown fills only part of the window (its medians not yet, or no longer, slowed).
void Network(const JobWindow& w, const AttributionContext& ctx, std::vector<Candidate>* out,
             std::unordered_map<int32_t, double>* net_extra, std::unordered_map<int32_t, double>* explained) {
  const double T = w.step_s, thr = ctx.threshold;
  const double slow_ratio = 1 / thr, ok_ratio = 1 + (slow_ratio - 1) / 2;
  const double strong_cost = 1 - thr, weak_cost = strong_cost / 2;
  std::map<std::tuple<uint32_t, uint64_t, int32_t, size_t>, std::vector<const CommWindow*>> siblings;
  for (const CommWindow& c : w.comms)
    if (c.count >= 2) siblings[{c.op, c.bytes, c.expected, c.nodes.size()}].push_back(&c);
  std::vector<CommState> states;
  for (const CommWindow& c : w.comms) {
    if (c.count < 2) continue;
    CommState s;
    s.c = &c;
    s.ref = std::numeric_limits<double>::infinity();
    if (ctx.comm_best != nullptr) {
      auto it = ctx.comm_best->find({c.comm, c.op, c.bytes});
      if (it != ctx.comm_best->end() && it->second > 0) s.ref = it->second, s.from_best = true;
    }
    const auto& sib = siblings[{c.op, c.bytes, c.expected, c.nodes.size()}];
    if (sib.size() >= 3) {
      std::vector<double> v;
      for (const CommWindow* o : sib)
        if (o != &c) v.push_back(o->transfer_s);
      double m = MedianOf(v);
      if (m > 0 && m < s.ref) s.ref = m, s.from_best = false;
    }
    if (!std::isfinite(s.ref)) continue;
    s.ratio = c.transfer_s / s.ref;
    s.extra = std::max(0.0, c.transfer_s - s.ref) * c.per_step;
    s.state = s.ratio >= slow_ratio && s.extra >= 0.01 * T ? 1 : s.ratio <= ok_ratio ? 0 : -1;
    const double mean_extra = std::max(0.0, c.mean_transfer_s - s.ref) * c.per_step;
    for (int32_t r : c.ranks) (*explained)[r] += mean_extra;
    states.push_back(s);
  }
  const CommState* worst = nullptr;
  std::vector<double> ratios;
  std::set<int> inter, all_nodes;
  bool first = true;
  size_t slowed = 0;
  for (const CommWindow& c : w.comms) all_nodes.insert(c.nodes.begin(), c.nodes.end());
  for (const CommState& s : states) {
    if (s.state != 1) continue;
    ++slowed;
    for (int32_t r : s.c->ranks) (*net_extra)[r] += s.extra;
    ratios.push_back(s.ratio);
    if (worst == nullptr || s.extra > worst->extra) worst = &s;
    std::set<int> nodes(s.c->nodes.begin(), s.c->nodes.end());
    if (first) {
      inter = nodes;
    } else {
      std::erase_if(inter, [&](int n) { return !nodes.contains(n); });
    }
    first = false;
  }
  if (worst == nullptr) return;
  int32_t max_rank = -1;
  double max_net = 0;
  for (auto& [r, x] : *net_extra)
    if (x > max_net || (x == max_net && r < max_rank)) max_net = x, max_rank = r;
  const double cost = max_net / T;
  if (cost < weak_cost) return;

  // Where: one node, else one link, else the job.
  std::set<int> node_cands = inter;
  for (const CommState& s : states)
    if (s.state == 0 && s.c->nodes.size() >= 2)
      for (int n : s.c->nodes) node_cands.erase(n);
  Candidate cand;
  Finding& f = cand.finding;
  f.cause = Cause::kNetwork;
  std::string where;
  if (node_cands.size() == 1 && all_nodes.size() >= 2) {
    int n = *node_cands.begin();
    f.scope = Scope::kNode;
    f.node = ctx.nodes->Name(n);
    f.ranks = RanksOf(ctx, {n});
    f.key = "node " + f.node;
    where = "with node " + f.node;
  } else {
    std::vector<std::pair<int, int>> links;
    for (int a : inter)
      for (int b : inter) {
        if (a >= b) continue;
        bool contradicted = false;
        for (const CommState& s : states)
          if (s.state == 0 && std::binary_search(s.c->nodes.begin(), s.c->nodes.end(), a) &&
              std::binary_search(s.c->nodes.begin(), s.c->nodes.end(), b))
            contradicted = true;
        if (!contradicted) links.emplace_back(a, b);
      }
    if (links.size() == 1) {
      auto [a, b] = links.front();
      auto first_rank = [&](int n) {
        auto it = ctx.node_ranks.find(n);
        return it == ctx.node_ranks.end() || it->second.empty() ? INT32_MAX : it->second.front();
      };
      if (first_rank(b) < first_rank(a)) std::swap(a, b);
      f.scope = Scope::kLink;
      f.node = ctx.nodes->Name(a);
      f.peer = ctx.nodes->Name(b);
      f.ranks = RanksOf(ctx, {a, b});
      f.key = "link " + f.node + " - " + f.peer;
      where = "between nodes " + f.node + " and " + f.peer;
    } else {
      f.scope = Scope::kJob;
      f.key = "job";
      where = "on every node";
    }
  }
  f.score = 1 / MedianOf(ratios);
  f.cost = cost;
  const CommWindow& c = *worst->c;
  f.detail = std::to_string(slowed) + " communicator" + (slowed == 1 ? "" : "s") + " " + where +
             " slower: " + ctx.ops->Name(c.op) + " of " + Bytes(c.bytes) + " over " + std::to_string(c.expected) +
             " ranks transfers in " + Seconds(c.transfer_s) + ", " + Fixed(worst->ratio, 1) + "x " +
             (worst->from_best ? "its best" : "its siblings'") + " (" + Seconds(worst->ref) + ")";
  cand.strong = cost >= strong_cost;
  cand.extra_s = max_net;
  cand.series_rank = max_rank;
  cand.series = Series::kTransfer;
  const RankWindow* rw = FindRank(w, max_rank);
  cand.level = (rw != nullptr ? rw->transfer_s : max_net) - max_net / 2;
  out->push_back(std::move(cand));
}

void Ranks(const JobWindow& w, const AttributionContext& ctx, const std::unordered_map<int32_t, double>& explained,
           std::vector<Candidate>* out) {
  const double T = w.step_s, thr = ctx.threshold;
  const double strong_cost = 1 - thr, weak_cost = strong_cost / 2;
  if (w.ranks.size() < 2) return;
  PeerMedian self, gc, data, net;
  std::unordered_map<uint32_t, PeerMedian> per_call;
  for (const RankWindow& r : w.ranks) {
    self.Add(r.rank, r.self_s);
    gc.Add(r.rank, r.gc_s);
    data.Add(r.rank, r.data_s);
    auto it = explained.find(r.rank);
    net.Add(r.rank, it != explained.end() ? it->second : 0);
    for (const SigTime& k : r.sigs)
      if (k.n > 0) per_call[k.sig].Add(r.rank, k.s / k.n);
  }
  for (PeerMedian* m : {&self, &gc, &data, &net}) m->Done();
  for (auto& [sig, m] : per_call) m.Done();

  std::vector<Candidate> found;
  for (const RankWindow& r : w.ranks) {
    const double peers_self = self.Of(r.rank);
    auto it = explained.find(r.rank);
    const double own_net = std::max(0.0, (it != explained.end() ? it->second : 0) - net.Of(r.rank));
    const double extra = r.self_s - peers_self - own_net;
    const double cost = extra / T;
    if (!(cost >= weak_cost) || r.lateness_s < 0.5 * extra || r.late_share < 0.25) continue;

    double d_compute = 0, worst_gain = 0, worst_ratio = 1, worst_own = 0, worst_peers = 0;
    uint32_t worst_sig = Names::kOverflow;
    for (const SigTime& k : r.sigs) {
      auto m = per_call.find(k.sig);
      if (k.n <= 0 || m == per_call.end() || m->second.size() < 2) continue;
      const double own = k.s / k.n, peers = m->second.Of(r.rank);
      const double gain = std::max(0.0, own - peers) * (k.n / r.steps);
      d_compute += gain;
      if (gain > worst_gain)
        worst_gain = gain, worst_sig = k.sig, worst_ratio = peers / own, worst_own = own, worst_peers = peers;
    }
    const double d_gc = r.gc_s - gc.Of(r.rank), d_data = r.data_s - data.Of(r.rank);
    Candidate cand;
    Finding& f = cand.finding;
    f.scope = Scope::kRank;
    f.rank = r.rank;
    f.node = ctx.nodes->Name(r.node);
    f.ranks = {r.rank};
    f.key = "rank " + std::to_string(r.rank);
    f.score = r.self_s > 0 ? peers_self / r.self_s : 1;
    f.cost = cost;
    const double best = std::max({d_compute, d_gc, d_data});
    if (best >= 0.5 * extra && best == d_compute) {
      f.cause = Cause::kGpuCompute;
      f.detail = ctx.sigs->Name(worst_sig) + " at " + Fixed(worst_ratio, 2) + "x its peers (" + Seconds(worst_own) +
                 " a call, peers " + Seconds(worst_peers) + ")";
    } else if (best >= 0.5 * extra && best == d_gc) {
      f.cause = Cause::kPythonGc;
      f.detail = "Python GC pauses " + Seconds(r.gc_s) + " per step (peers " + Seconds(gc.Of(r.rank)) + ")";
    } else if (best >= 0.5 * extra && best == d_data) {
      f.cause = Cause::kDataLoading;
      f.detail = "DataLoader __next__ " + Seconds(r.data_s) + " per step (peers " + Seconds(data.Of(r.rank)) + ")";
    } else {
      f.cause = Cause::kHost;
      SampleCounts own, peers;
      if (ctx.samples != nullptr) SamplesToCompare(*ctx.samples, r.rank, 2 * T, &own, &peers);
      f.detail = SampleDetail(own, peers);
      if (f.detail.empty())
        f.detail = "reaches collectives " + Seconds(r.lateness_s) +
                   " after its peers per step while its GPU work is no slower (no Python samples of it)";
    }
    cand.strong = cost >= strong_cost;
    cand.extra_s = extra;
    cand.series_rank = r.rank;
    cand.series = Series::kLateness;
    cand.level = 0.5 * r.lateness_s;
    found.push_back(std::move(cand));
  }

  // A node whose judged ranks are all slow for the same cause is named once.
  std::map<int, std::vector<const RankWindow*>> judged_by_node;
  for (const RankWindow& r : w.ranks) judged_by_node[r.node].push_back(&r);
  if (judged_by_node.size() >= 2) {
    for (auto& [node, members] : judged_by_node) {
      if (members.size() < 2) continue;
      std::vector<Candidate*> mine;
      for (Candidate& c : found)
        if (ctx.nodes->Name(node) == c.finding.node && c.finding.scope == Scope::kRank) mine.push_back(&c);
      if (mine.size() != members.size()) continue;
      bool same = std::all_of(mine.begin(), mine.end(),
                              [&](const Candidate* c) { return c->finding.cause == mine.front()->finding.cause; });
      if (!same) continue;
      Candidate group = *mine.front();
      for (const Candidate* c : mine) {
        if (c->extra_s > group.extra_s)
          group.extra_s = c->extra_s, group.series_rank = c->series_rank, group.level = c->level,
          group.finding.detail = c->finding.detail;
        group.finding.score = std::min(group.finding.score, c->finding.score);
        group.strong = group.strong || c->strong;
      }
      Finding& f = group.finding;
      f.scope = Scope::kNode;
      f.rank = -1;
      f.ranks = RanksOf(ctx, {node});
      f.key = "node " + f.node;
      f.cost = group.extra_s / T;
      f.detail = "every rank of the node: " + f.detail;
      for (Candidate* c : mine) c->finding.key.clear();  // replaced
      found.push_back(std::move(group));
    }
  }
  for (Candidate& c : found)
    if (!c.finding.key.empty()) out->push_back(std::move(c));
}

void Job(const JobWindow& w, const AttributionContext& ctx, std::vector<Candidate>* out) {
  if (ctx.job_best == nullptr || !(ctx.job_best->step_s > 0) || w.ranks.empty()) return;
  for (const Candidate& c : *out)
    if (c.finding.scope == Scope::kJob) return;  // the network already names the job
  const JobBest& b = *ctx.job_best;
  const double T = w.step_s, thr = ctx.threshold;
  const double strong_cost = 1 - thr, weak_cost = strong_cost / 2;
  double explained = 0;
  for (const Candidate& c : *out) explained = std::max(explained, c.extra_s);
  const double residual = T - b.step_s - explained;
  const double score = b.step_s / T;
  if (!(residual / T >= weak_cost)) return;
  const double d_gc = w.gc_s - b.gc_s, d_data = w.data_s - b.data_s;
  struct Part {
    double grew;
    Cause cause;
    const char* what;
  };
  const Part parts[] = {
      {w.compute_s - b.compute_s, Cause::kGpuCompute, "kernel time"},
      {w.transfer_s - b.transfer_s, Cause::kNetwork, "collective transfer time"},
      {d_gc, Cause::kPythonGc, "Python GC pauses"},
      {d_data, Cause::kDataLoading, "DataLoader __next__ time"},
      {w.idle_s - b.idle_s - std::max(0.0, d_gc) - std::max(0.0, d_data), Cause::kHost,
       "GPU idle time (the host side: a checkpoint, logging, evaluation...)"},
  };
  const Part* top = &parts[0];
  for (const Part& p : parts)
    if (p.grew > top->grew) top = &p;
  Candidate cand;
  Finding& f = cand.finding;
  f.scope = Scope::kJob;
  f.cause = top->cause;
  f.key = "job";
  f.score = score;
  f.cost = residual / T;
  f.detail = "every rank's step takes " + Seconds(T) + ", " + Fixed(T / b.step_s, 2) + "x the job's best (" +
             Seconds(b.step_s) + "); " + top->what + " grew most: +" + Seconds(std::max(0.0, top->grew)) + " per step";
  cand.strong = score < thr && residual / T >= strong_cost;
  cand.extra_s = residual;
  cand.series_rank = w.ranks.front().rank;
  cand.series = Series::kStep;
  cand.level = (b.step_s + T) / 2;
  out->push_back(std::move(cand));
}

}  // namespace

void SamplesToCompare(const std::map<int32_t, std::vector<SampledStep>>& all, int32_t rank, double long_step_s,
                      SampleCounts* own, SampleCounts* peers) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double own_lo = kInf, own_hi = -kInf, peer_lo = kInf, peer_hi = -kInf;
  bool skip_long = long_step_s > 0;
  auto skipped = [&](const SampledStep& s) { return skip_long && s.end - s.begin > long_step_s; };
  for (const auto& [r, steps] : all)
    for (const SampledStep& s : steps) {
      double& lo = r == rank ? own_lo : peer_lo;
      double& hi = r == rank ? own_hi : peer_hi;
      lo = std::min(lo, s.begin);
      hi = std::max(hi, s.end);
    }
  const double lo = std::max(own_lo, peer_lo), hi = std::min(own_hi, peer_hi);
  auto count = [&](bool common) {
    *own = SampleCounts{};
    *peers = SampleCounts{};
    for (const auto& [r, steps] : all) {
      if (!common && r != rank) continue;
      SampleCounts& into = r == rank ? *own : *peers;
      for (const SampledStep& s : steps) {
        const double mid = (s.begin + s.end) / 2;
        if ((common && (mid < lo || mid > hi)) || skipped(s)) continue;
        for (const auto& [frame, n] : s.frames) {
          into.by_frame[frame] += n;
          into.total += n;
        }
      }
    }
  };
  for (int pass = 0; pass < 2; ++pass, skip_long = false) {
    *own = SampleCounts{};
    if (hi > lo) count(true);
    if (own->total == 0) count(false);
    if (own->total > 0) break;
  }
}

std::string SampleDetail(const SampleCounts& own, const SampleCounts& peers) {
  if (own.total == 0) return "";
  auto share = [](const SampleCounts& c, const std::string& frame) {
    auto it = c.by_frame.find(frame);
    return c.total == 0 || it == c.by_frame.end() ? 0.0 : static_cast<double>(it->second) / c.total;
  };
  const std::string* best = nullptr;
  double best_gain = -2;
  for (const auto& [frame, n] : own.by_frame) {
    double gain = share(own, frame) - share(peers, frame);
    if (gain > best_gain) best_gain = gain, best = &frame;
  }
  std::string d = *best + " in " + Percent(share(own, *best)) + " of its main thread's " + std::to_string(own.total) +
                  " Python samples";
  if (peers.total == 0) return d + " (no peer samples to compare)";
  return d + ", " + Percent(share(peers, *best)) + " of its peers'";
}

std::string Seconds(double s) {
  if (std::fabs(s) < 1) return Fixed(s * 1000, 1) + " ms";
  return Fixed(s, 2) + " s";
}

std::vector<Candidate> Attribute(const JobWindow& w, const AttributionContext& ctx) {
  std::vector<Candidate> out;
  if (!(w.step_s > 0)) return out;
  std::unordered_map<int32_t, double> net_extra, explained;
  Network(w, ctx, &out, &net_extra, &explained);
  Ranks(w, ctx, explained, &out);
  Job(w, ctx, &out);
  // A slowdown is one thing slow for one reason: the same node slow for another cause (its ranks
  // late after its network was slow, say) is another slowdown, started and ended on its own.
  for (Candidate& c : out) c.finding.key += std::string(" ") + CauseName(c.finding.cause);
  std::stable_sort(out.begin(), out.end(),
                   [](const Candidate& a, const Candidate& b) { return a.finding.cost > b.finding.cost; });
  return out;
}

}  // namespace xtimer::slowdown
