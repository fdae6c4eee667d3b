// The judge's bookkeeping: records in, collectives joined, windows summarised, candidates
// attributed, episodes kept, baselines remembered (slowdown_judge.h says what and why).
#include "slowdown/slowdown_judge.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>

#include "slowdown/attribution.h"
#include "slowdown/clock_offsets.h"
#include "slowdown/collectives.h"
#include "slowdown/episodes.h"
#include "slowdown/features.h"
#include "slowdown/names.h"
#include "slowdown/robust_stats.h"

namespace xtimer::slowdown {
namespace {

// The smallest value pushed in the last `horizon` (times pushed in order), with what came with it.
template <typename Payload>
class SlidingMin {
 public:
  struct Entry {
    double t, value;
    Payload payload;
  };
  void Push(double t, double value, Payload p) {
    while (!q_.empty() && q_.back().value >= value) q_.pop_back();
    q_.push_back(Entry{t, value, std::move(p)});
  }
  void Expire(double before) {
    while (!q_.empty() && q_.front().t < before) q_.pop_front();
  }
  const Entry* Best() const { return q_.empty() ? nullptr : &q_.front(); }
  bool empty() const { return q_.empty(); }

 private:
  std::deque<Entry> q_;
};

struct None {};

}  // namespace

struct Judge::Impl {
  explicit Impl(JudgeOptions o) : opt(o), episodes(o.start_evals, o.end_evals) {}

  JudgeOptions opt;
  Names nodes, sigs, comms, ops;
  std::map<int32_t, RankSteps> ranks;
  CollectiveTable colls;
  ClockOffsets offsets;
  Episodes episodes;
  uint64_t stamp = 0;
  double last_end = -std::numeric_limits<double>::infinity();
  std::vector<Finding> last_active;
  double history_start = -1;
  SlidingMin<JobBest> job_best;
  std::map<CommKey, SlidingMin<None>> comm_best;
  std::map<int32_t, SlidingMin<None>> self_best;
  std::map<int32_t, double> sample_asked;

  void Drop(RankSteps& r, StepEntry& e) {
    for (auto& [c, i] : e.colls) colls.Release(c);
    e.colls.clear();
  }

  void Reset(RankSteps& r) {
    for (StepEntry& e : r.steps) Drop(r, e);
    r.steps.clear();
    r.records = 0;
    r.last_step = INT64_MIN;
    r.last_t_end = 0;
  }

  void Add(StepRecord rec, double arrival) {
    uint32_t node = nodes.Id(rec.node);
    if (node == Names::kOverflow) return;
    RankSteps& r = ranks[rec.rank];
    if (r.records > 0 && r.pid != rec.pid) Reset(r);
    // A batch sent twice (an agent that retried) is not counted twice.
    if (r.records > 0 && rec.step <= r.last_step && rec.t_end <= r.last_t_end) return;
    r.rank = rec.rank;
    r.world = rec.world;
    r.node = static_cast<int>(node);
    r.pid = rec.pid;
    r.last_arrival = arrival;
    r.last_step = rec.step;
    r.last_t_end = rec.t_end;

    StepEntry e;
    e.step = rec.step;
    e.t_begin = rec.t_begin;
    e.t_end = rec.t_end;
    e.step_s = rec.t_end - rec.t_begin;
    e.idle_s = rec.gpu_idle_s;
    e.gc_s = rec.gc_s;
    e.data_s = rec.data_s;
    e.warmup = r.records < opt.warmup_steps;
    ++r.records;
    for (const KernelTime& k : rec.kernels) {
      uint32_t sig = sigs.Id(k.sig);
      if (sig == Names::kOverflow) continue;
      e.kernels.push_back(SigTime{sig, static_cast<double>(k.n), k.s});
      e.compute_s += k.s;
    }
    for (const CollTime& c : rec.colls) {
      uint32_t comm = comms.Id(c.comm), op = ops.Id(c.op);
      if (comm == Names::kOverflow || op == Names::kOverflow) continue;
      CollMember m;
      m.rank = rec.rank;
      m.node = r.node;
      m.start = c.start;
      m.end = c.end;
      uint32_t index = 0;
      if (Collective* joined = colls.Add(comm, c.seq, op, c.bytes, c.ranks, m, arrival, &index))
        e.colls.emplace_back(joined, index);
    }
    e.samples = std::move(rec.samples);
    r.steps.push_back(std::move(e));
    while (r.steps.size() > opt.max_steps_per_rank) {
      Drop(r, r.steps.front());
      r.steps.pop_front();
    }
  }

  bool Live(const RankSteps& r, double now) const { return now - r.last_arrival <= opt.stale_s; }

  // The newest final step's end on the reference clock, or -inf.
  double NewestFinal(const RankSteps& r) const {
    for (auto it = r.steps.rbegin(); it != r.steps.rend(); ++it)
      if (it->final) return it->t_end - offsets.Offset(r.node);
    return -std::numeric_limits<double>::infinity();
  }

  std::vector<TimedValue> SeriesOf(int32_t rank, Series series) const {
    std::vector<TimedValue> out;
    auto it = ranks.find(rank);
    if (it == ranks.end()) return out;
    const double offset = offsets.Offset(it->second.node);
    for (const StepEntry& e : it->second.steps) {
      if (!e.final || e.warmup) continue;
      double v = series == Series::kLateness ? e.lateness : series == Series::kTransfer ? e.transfer : e.step_s;
      out.push_back(TimedValue{e.t_begin - offset, v});
    }
    std::sort(out.begin(), out.end(), [](const TimedValue& a, const TimedValue& b) { return a.t < b.t; });
    return out;
  }

  // Each rank's samples of the steps that ended in the last `span` seconds (reference clock), by
  // innermost frame.
  std::map<int32_t, std::vector<SampledStep>> Samples(double end, double span) const {
    std::map<int32_t, std::vector<SampledStep>> out;
    for (const auto& [rank, r] : ranks) {
      const double offset = offsets.Offset(r.node);
      for (const StepEntry& e : r.steps) {
        if (e.samples.empty() || e.t_end - offset < end - span) continue;
        SampledStep& step = out[rank].emplace_back();
        step.begin = e.t_begin - offset;
        step.end = e.t_end - offset;
        for (const StackSample& s : e.samples) step.frames.emplace_back(s.frames.substr(0, s.frames.find(';')), s.n);
      }
    }
    return out;
  }

  Verdict Evaluate(double now) {
    Verdict v;
    v.updated = now;
    if (ranks.empty()) return v;
    ++stamp;
    colls.Finalize(now, opt.join_grace_s, &offsets, ranks.begin()->second.node, static_cast<int>(nodes.size()));
    double end = std::numeric_limits<double>::infinity();
    std::vector<const RankSteps*> live;
    for (auto& [rank, r] : ranks) {
      for (StepEntry& e : r.steps) FinalizeStep(&e);
      if (!Live(r, now)) continue;
      double newest = NewestFinal(r);
      if (!std::isfinite(newest)) continue;
      end = std::min(end, newest);
      live.push_back(&r);
    }
    if (live.empty()) {
      Expire(now, last_end);
      return v;
    }
    const WindowSpec spec{end, opt.window_s, opt.min_steps, stamp};
    JobWindow w = Summarize(live, offsets, spec);
    v.window_end = end;
    v.judged = !w.ranks.empty();
    v.step_time_s = w.step_s;
    const bool fresh = end > last_end;

    const JobBest* best = nullptr;
    if (const auto* b = job_best.Best(); b != nullptr && history_start >= 0 && history_start <= end - 2 * opt.window_s)
      best = &b->payload;
    v.baseline_step_time_s = best != nullptr ? best->step_s : 0;

    if (v.judged && fresh) {
      std::map<CommKey, double> comm_ref;
      for (const auto& [key, m] : comm_best)
        if (const auto* b = m.Best()) comm_ref[key] = b->value;
      const std::map<int32_t, std::vector<SampledStep>> samples = Samples(end, opt.sample_s + opt.window_s + 5);
      AttributionContext ctx;
      ctx.threshold = opt.threshold;
      ctx.nodes = &nodes;
      ctx.sigs = &sigs;
      ctx.comms = &comms;
      ctx.ops = &ops;
      ctx.job_best = best;
      ctx.comm_best = &comm_ref;
      ctx.samples = &samples;
      for (const RankSteps* r : live) ctx.node_ranks[r->node].push_back(r->rank);
      std::vector<Candidate> candidates = Attribute(w, ctx);
      for (Candidate& c : candidates) {
        auto series = SeriesOf(c.series_rank, c.series);
        double fallback = series.empty() ? end : series.back().t;
        for (const RankWindow& rw : w.ranks)
          if (rw.rank == c.series_rank) fallback = rw.first;
        c.finding.since = OnsetOf(series, c.level, fallback);
      }
      last_active = episodes.Update(candidates, end, &v.events);
      AskForSamples(w, candidates, samples, now, &v);
    }
    v.slow = last_active;
    RankStatuses(w, &v);
    if (v.judged && fresh) Remember(w, end);
    last_end = std::max(last_end, end);
    Expire(now, end);
    return v;
  }

  // A host straggler without samples is asked for some, and so is one peer that is not suspected
  // (on the straggler's node if it has one, else the lowest rank): what the straggler does more
  // than a peer is its gap. Each rank at most once per sample period.
  void AskForSamples(const JobWindow& w, const std::vector<Candidate>& candidates,
                     const std::map<int32_t, std::vector<SampledStep>>& samples, double now, Verdict* v) {
    if (opt.sample_s <= 0) return;
    auto ask = [&](int32_t rank) {
      auto asked = sample_asked.find(rank);
      if (samples.contains(rank) || (asked != sample_asked.end() && now - asked->second < opt.sample_s + 5)) return;
      sample_asked[rank] = now;
      v->samples.push_back(SampleRequest{rank, opt.sample_s, opt.sample_hz});
    };
    std::vector<int32_t> suspects;
    for (const Candidate& c : candidates)
      if (c.finding.scope == Scope::kRank && c.finding.cause == Cause::kHost) suspects.push_back(c.finding.rank);
    if (suspects.empty()) return;
    for (int32_t s : suspects) ask(s);
    auto suspected = [&](int32_t r) { return std::find(suspects.begin(), suspects.end(), r) != suspects.end(); };
    const RankWindow* peer = nullptr;
    int suspect_node = -1;
    for (const RankWindow& r : w.ranks) {
      if (r.rank == suspects.front()) suspect_node = r.node;
      if (!suspected(r.rank) && samples.contains(r.rank)) return;  // a peer has samples already
    }
    for (const RankWindow& r : w.ranks)
      if (!suspected(r.rank) && (peer == nullptr || (r.node == suspect_node && peer->node != suspect_node))) peer = &r;
    if (peer != nullptr) ask(peer->rank);
  }

  void RankStatuses(const JobWindow& w, Verdict* v) {
    PeerMedian self;
    for (const RankWindow& r : w.ranks) self.Add(r.rank, r.self_s);
    self.Done();
    for (const RankWindow& r : w.ranks) {
      RankStatus s;
      s.rank = r.rank;
      s.node = nodes.Name(r.node);
      s.step_time_s = r.step_s;
      s.steps = r.steps;
      s.score = r.self_s > 0 && w.ranks.size() >= 2 ? self.Of(r.rank) / r.self_s : 1;
      auto b = self_best.find(r.rank);
      if (b != self_best.end() && b->second.Best() != nullptr && r.self_s > 0)
        s.individual = b->second.Best()->value / r.self_s;
      for (const Finding& f : v->slow)
        if (!s.slow && std::binary_search(f.ranks.begin(), f.ranks.end(), r.rank)) s.slow = true, s.cause = f.cause;
      v->ranks.push_back(std::move(s));
    }
  }

  // The window joins the baselines; what is older than the baseline period leaves them.
  void Remember(const JobWindow& w, double end) {
    if (history_start < 0) history_start = end;
    job_best.Push(end, w.step_s, JobBest{w.step_s, w.compute_s, w.transfer_s, w.gc_s, w.data_s, w.idle_s});
    job_best.Expire(end - opt.baseline_s);
    for (const CommWindow& c : w.comms)
      if (c.count >= 2) comm_best[{c.comm, c.op, c.bytes}].Push(end, c.transfer_s, None{});
    for (auto it = comm_best.begin(); it != comm_best.end();) {
      it->second.Expire(end - opt.baseline_s);
      it = it->second.empty() ? comm_best.erase(it) : std::next(it);
    }
    for (const RankWindow& r : w.ranks) self_best[r.rank].Push(end, r.self_s, None{});
    for (auto it = self_best.begin(); it != self_best.end();) {
      it->second.Expire(end - opt.baseline_s);
      it = it->second.empty() ? self_best.erase(it) : std::next(it);
    }
  }

  // Steps older than keep_s before the window's end go; so do ranks silent for that long.
  void Expire(double now, double end) {
    for (auto it = ranks.begin(); it != ranks.end();) {
      RankSteps& r = it->second;
      const double offset = offsets.Offset(r.node);
      while (std::isfinite(end) && !r.steps.empty() && r.steps.front().t_end - offset < end - opt.keep_s) {
        Drop(r, r.steps.front());
        r.steps.pop_front();
      }
      if (now - r.last_arrival > opt.keep_s + opt.stale_s) {
        Reset(r);
        sample_asked.erase(it->first);
        it = ranks.erase(it);
      } else {
        ++it;
      }
    }
  }
};

Judge::Judge(JudgeOptions options) : impl_(std::make_unique<Impl>(options)) {}
Judge::~Judge() = default;
void Judge::Add(StepRecord record, double arrival_s) { impl_->Add(std::move(record), arrival_s); }
Verdict Judge::Evaluate(double now_s) { return impl_->Evaluate(now_s); }
const JudgeOptions& Judge::options() const { return impl_->opt; }
size_t Judge::ranks() const { return impl_->ranks.size(); }

}  // namespace xtimer::slowdown
