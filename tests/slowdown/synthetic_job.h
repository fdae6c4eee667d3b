// A synchronous data-parallel job, simulated step by step, as step records (docs/formats.md):
// every rank does host work (Python, DataLoader, GC), then its kernels, then meets the others in
// a world all-reduce; then an all-reduce within its node and one with the same local rank on the
// next node (a ring of nodes). A collective ends for every member `transfer` after its last
// member arrived, so a straggler makes the others wait, and its own collectives are the shortest.
// Injections change one rank, one node's network, one link or every rank from a moment on; each
// node's clock may be off; noise jitters every duration and adds rare long steps to single ranks.
//
// Records are handed to the judge as agents would: each rank's records of the last second in a
// batch, relayed `delay_s` later; the judge evaluates every `interval` seconds of true time.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/steps/step_record.h"
#include "slowdown/slowdown_judge.h"

namespace xtimer::slowdown::sim {

struct Injection {
  enum Kind { kSlowGpu, kSlowNode, kSlowLink, kHost, kGc, kData, kJobData, kJobGemm } kind;
  int who = 0;        // rank (kSlowGpu, kHost, kGc, kData) or node (kSlowNode, first node of kSlowLink)
  double amount = 1;  // factor (kSlowGpu, kSlowNode, kSlowLink, kJobGemm) or seconds per step
  double from = 0;    // seconds after the start
  double to = 1e18;
};

struct JobConfig {
  int nodes = 2;
  int per_node = 4;
  double start = 1.7e9;
  double gemm_s = 0.08;   // "GEMM bf16 4096x4096x4096", 4 calls per step
  double other_s = 0.02;  // "elementwise_kernel", 20 calls
  double host_s = 0.01;   // Python before the kernels
  double data_s = 0.005;  // DataLoader
  double world_transfer_s = 0.02, node_transfer_s = 0.004, pair_transfer_s = 0.01;
  double noise = 0.02;  // relative jitter of every duration
  double spike_p = 0;   // chance per rank and step of a long step (host), of spike_s
  double spike_s = 0.5;
  bool node_first = false;   // the node all-reduce before the world one (a slow node's ranks come late to it)
  int checkpoint_every = 0;  // every rank pauses this often for checkpoint_s (about the same)
  double checkpoint_s = 1.5;
  std::vector<double> clock_offset;  // per node, seconds (missing: 0)
  std::vector<Injection> injections;
  uint64_t seed = 1;
};

inline std::string NodeName(int n) { return "node" + std::to_string(n); }

class SyntheticJob {
 public:
  explicit SyntheticJob(JobConfig c) : c_(std::move(c)), rng_(c_.seed) {
    world_ = c_.nodes * c_.per_node;
    begin_.assign(world_, c_.start);
    seq_.clear();
  }

  int world() const { return world_; }
  int NodeOf(int rank) const { return rank / c_.per_node; }
  double now() const { return *std::min_element(begin_.begin(), begin_.end()); }

  // While a rank is asked to sample (until `until`, true time), its records carry samples.
  void Sample(int rank, double until) { sampling_[rank] = until; }

  // The next step of every rank (their records, true end times).
  std::vector<std::pair<double, StepRecord>> Step() {
    const double t = now() - c_.start;
    std::vector<double> ready(world_), pre(world_), gemm(world_), gc(world_, 0), data(world_), host(world_);
    std::vector<StepRecord> recs(world_);
    bool checkpoint = c_.checkpoint_every > 0 && step_ > 0 && step_ % c_.checkpoint_every == 0;
    for (int r = 0; r < world_; ++r) {
      host[r] = J(c_.host_s);
      data[r] = J(c_.data_s);
      gemm[r] = J(c_.gemm_s);
      double other = J(c_.other_s);
      for (const Injection& i : c_.injections) {
        if (t < i.from || t >= i.to) continue;
        if (i.kind == Injection::kSlowGpu && i.who == r) gemm[r] *= i.amount;
        if (i.kind == Injection::kJobGemm) gemm[r] *= i.amount;
        if (i.kind == Injection::kHost && i.who == r) host[r] += J(i.amount);
        if (i.kind == Injection::kGc && i.who == r) gc[r] += J(i.amount);
        if (i.kind == Injection::kData && i.who == r) data[r] += J(i.amount);
        if (i.kind == Injection::kJobData) data[r] += J(i.amount);
      }
      if (checkpoint) host[r] += J(c_.checkpoint_s);
      if (c_.spike_p > 0 && U() < c_.spike_p) host[r] += J(c_.spike_s);
      pre[r] = host[r] + data[r] + gc[r];
      ready[r] = begin_[r] + pre[r] + gemm[r] + other;
      StepRecord& rec = recs[r];
      rec.rank = r;
      rec.world = world_;
      rec.node = NodeName(NodeOf(r));
      rec.pid = 1000 + r;
      rec.step = step_;
      rec.t_begin = begin_[r];
      rec.gc_s = gc[r];
      rec.data_s = data[r];
      rec.kernels = {{"GEMM bf16 4096x4096x4096", 4, gemm[r], 0}, {"elementwise_kernel", 20, other, 0}};
    }
    // World all-reduce, and within each node (in that order, or the other).
    std::vector<int> all(world_);
    for (int r = 0; r < world_; ++r) all[r] = r;
    if (!c_.node_first) Collective("world", all, c_.world_transfer_s, &ready, &recs);
    for (int n = 0; n < c_.nodes; ++n) {
      std::vector<int> members;
      for (int l = 0; l < c_.per_node; ++l) members.push_back(n * c_.per_node + l);
      Collective("node" + std::to_string(n), members, c_.node_transfer_s, &ready, &recs);
    }
    if (c_.node_first) Collective("world", all, c_.world_transfer_s, &ready, &recs);
    // With the same local rank on the next node (a ring of nodes; one pair for two nodes).
    int pairs = c_.nodes == 2 ? 1 : c_.nodes >= 3 ? c_.nodes : 0;
    for (int k = 0; k < pairs; ++k) {
      int a = k, b = (k + 1) % c_.nodes;
      for (int l = 0; l < c_.per_node; ++l)
        Collective("pair" + std::to_string(a) + "-" + std::to_string(b) + "." + std::to_string(l),
                   {a * c_.per_node + l, b * c_.per_node + l}, c_.pair_transfer_s, &ready, &recs);
    }
    std::vector<std::pair<double, StepRecord>> out;
    for (int r = 0; r < world_; ++r) {
      StepRecord& rec = recs[r];
      double end = ready[r] + 0.001;
      double off = Offset(NodeOf(r));
      rec.t_begin += off;
      rec.t_end = end + off;
      double len = end - begin_[r];
      rec.gpu_idle_s = pre[r];
      rec.gpu_busy_s = len - pre[r];
      rec.issue_latency_s = 2e-5;
      auto s = sampling_.find(r);
      if (s != sampling_.end() && begin_[r] < s->second) rec.samples = SamplesOf(r, len, host[r]);
      begin_[r] = end;
      out.emplace_back(end, std::move(rec));
    }
    ++step_;
    return out;
  }

 private:
  double Offset(int node) const { return node < static_cast<int>(c_.clock_offset.size()) ? c_.clock_offset[node] : 0; }
  double U() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
  double J(double v) {
    if (c_.noise <= 0) return v;
    return v * std::exp(std::normal_distribution<double>(0, c_.noise)(rng_));
  }
  double TransferFactor(const std::vector<int>& members, double t) const {
    double f = 1;
    for (const Injection& i : c_.injections) {
      if (t < i.from || t >= i.to) continue;
      bool has_a = false, has_b = false;
      for (int m : members) {
        has_a |= NodeOf(m) == i.who;
        has_b |= NodeOf(m) == (i.who + 1) % c_.nodes;
      }
      if (i.kind == Injection::kSlowNode && has_a) f *= i.amount;
      if (i.kind == Injection::kSlowLink && has_a && has_b) f *= i.amount;
    }
    return f;
  }
  void Collective(const std::string& comm, const std::vector<int>& members, double transfer, std::vector<double>* ready,
                  std::vector<StepRecord>* recs) {
    int64_t seq = seq_[comm]++;
    double last = 0;
    for (int m : members) last = std::max(last, (*ready)[m]);
    double x = J(transfer) * TransferFactor(members, last - c_.start);
    double end = last + x;
    for (int m : members) {
      double off = Offset(NodeOf(m));
      double start = (*ready)[m];
      double my_end = end + std::abs(J(1e-5));
      CollTime ct;
      ct.comm = comm;
      ct.seq = seq;
      ct.op = "AllReduce";
      ct.bytes = comm == "world" ? 67108864 : 8388608;
      ct.ranks = static_cast<int32_t>(members.size());
      ct.call = start - 1e-4 + off;
      ct.start = start + off;
      ct.end = my_end + off;
      (*recs)[m].colls.push_back(ct);
      (*ready)[m] = my_end;
    }
  }
  // Main-thread samples at 20 Hz: the host injection's time in slow_fn, the rest in the loop.
  std::vector<StackSample> SamplesOf(int rank, double len, double host) {
    double slow = 0;
    for (const Injection& i : c_.injections)
      if (i.kind == Injection::kHost && i.who == rank) slow = i.amount;
    std::vector<StackSample> out;
    uint32_t n_slow = static_cast<uint32_t>(std::lround(std::min(slow, host) * 20));
    uint32_t n_rest = static_cast<uint32_t>(std::lround(std::max(0.0, len - std::min(slow, host)) * 20));
    if (n_slow > 0) out.push_back({"slow_fn (train.py:40);main (train.py:88)", n_slow});
    if (n_rest > 0) out.push_back({"train_step (train.py:61);main (train.py:90)", n_rest});
    return out;
  }

  JobConfig c_;
  std::mt19937_64 rng_;
  int world_ = 0;
  int64_t step_ = 0;
  std::vector<double> begin_;
  std::map<std::string, int64_t> seq_;
  std::map<int, double> sampling_;
};

// One evaluation's outcome, for the checks.
struct Evaluation {
  double t;  // seconds after the start
  Verdict verdict;
};

// Runs the job for `seconds` under a judge: records delivered in 1 s batches `delay_s` after the
// batch, evaluations every `interval` s, sample requests answered (the rank samples from then on).
inline std::vector<Evaluation> RunJob(JobConfig config, double seconds, JudgeOptions options = {},
                                      double delay_s = 0.5) {
  SyntheticJob job(config);
  Judge judge(options);
  std::vector<Evaluation> out;
  std::vector<std::pair<double, StepRecord>> queue;  // (true end, record)
  double next_batch = config.start + 1, next_eval = config.start + options.interval_s;
  while (job.now() < config.start + seconds) {
    for (auto& r : job.Step()) queue.push_back(std::move(r));
    const double now = job.now();
    // Deliveries and evaluations in the order of their times, up to the simulation's present.
    for (;;) {
      const double deliver_at = next_batch + delay_s;
      if (std::min(deliver_at, next_eval) > now) break;
      if (deliver_at <= next_eval) {
        std::stable_sort(queue.begin(), queue.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        auto cut = std::find_if(queue.begin(), queue.end(), [&](const auto& r) { return r.first > next_batch; });
        for (auto it = queue.begin(); it != cut; ++it) judge.Add(std::move(it->second), deliver_at);
        queue.erase(queue.begin(), cut);
        next_batch += 1;
      } else {
        Verdict v = judge.Evaluate(next_eval);
        for (const SampleRequest& s : v.samples) job.Sample(s.rank, next_eval + s.seconds);
        out.push_back(Evaluation{next_eval - config.start, std::move(v)});
        next_eval += options.interval_s;
      }
    }
  }
  return out;
}

}  // namespace xtimer::slowdown::sim
