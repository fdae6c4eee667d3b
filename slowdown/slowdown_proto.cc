#include "slowdown/slowdown_proto.h"

#include "common/utf8_text.h"

namespace xtimer::slowdown {
namespace {

// At most `max` bytes of a wire string (it may be megabytes), not split inside a character.
std::string Capped(const std::string& s, size_t max) {
  std::string out = s.size() <= max ? s : s.substr(0, max + 4);
  CutUtf8(&out, max);
  return out;
}

bool CauseOf(const std::string& name, Cause* out) {
  for (Cause c : {Cause::kGpuCompute, Cause::kNetwork, Cause::kHost, Cause::kPythonGc, Cause::kDataLoading})
    if (name == CauseName(c)) return *out = c, true;
  return false;
}

bool ScopeOf(const std::string& name, Scope* out) {
  for (Scope s : {Scope::kRank, Scope::kNode, Scope::kLink, Scope::kJob})
    if (name == ScopeName(s)) return *out = s, true;
  return false;
}

}  // namespace

v1::StepRecord StepRecordToProto(const StepRecord& r) {
  v1::StepRecord p;
  p.set_rank(r.rank);
  p.set_world(r.world);
  p.set_node(r.node);
  p.set_pid(r.pid);
  p.set_step(r.step);
  p.set_t_begin(r.t_begin);
  p.set_t_end(r.t_end);
  p.set_gpu_busy_s(r.gpu_busy_s);
  p.set_gpu_idle_s(r.gpu_idle_s);
  p.set_issue_latency_s(r.issue_latency_s);
  p.set_gc_s(r.gc_s);
  p.set_data_s(r.data_s);
  for (const KernelTime& k : r.kernels) {
    v1::KernelTime* x = p.add_kernels();
    x->set_sig(k.sig);
    x->set_n(k.n);
    x->set_s(k.s);
    x->set_tflops(k.tflops);
  }
  for (const CollTime& c : r.colls) {
    v1::CollTime* x = p.add_colls();
    x->set_comm(c.comm);
    x->set_seq(c.seq);
    x->set_op(c.op);
    x->set_bytes(c.bytes);
    x->set_ranks(c.ranks);
    x->set_call(c.call);
    x->set_start(c.start);
    x->set_end(c.end);
  }
  for (const StackSample& s : r.samples) {
    v1::StackSample* x = p.add_samples();
    x->set_frames(s.frames);
    x->set_n(s.n);
  }
  return p;
}

StepRecord StepRecordFromProto(const v1::StepRecord& p) {
  StepRecord r;
  r.rank = p.rank();
  r.world = p.world();
  r.node = Capped(p.node(), StepLimits::kMaxNode);
  r.pid = p.pid();
  r.step = p.step();
  r.t_begin = p.t_begin();
  r.t_end = p.t_end();
  r.gpu_busy_s = p.gpu_busy_s();
  r.gpu_idle_s = p.gpu_idle_s();
  r.issue_latency_s = p.issue_latency_s();
  r.gc_s = p.gc_s();
  r.data_s = p.data_s();
  for (const v1::KernelTime& k : p.kernels()) {
    if (r.kernels.size() >= StepLimits::kMaxKernels) break;
    r.kernels.push_back(KernelTime{Capped(k.sig(), StepLimits::kMaxSig), k.n(), k.s(), k.tflops()});
  }
  for (const v1::CollTime& c : p.colls()) {
    if (r.colls.size() >= StepLimits::kMaxColls) break;
    r.colls.push_back(CollTime{Capped(c.comm(), StepLimits::kMaxComm), c.seq(), Capped(c.op(), StepLimits::kMaxOp),
                               c.bytes(), c.ranks(), c.call(), c.start(), c.end()});
  }
  for (const v1::StackSample& s : p.samples()) {
    if (r.samples.size() >= StepLimits::kMaxSamples) break;
    r.samples.push_back(StackSample{Capped(s.frames(), StepLimits::kMaxFrames), s.n()});
  }
  return r;
}

v1::Slowdown VerdictToProto(const Verdict& v) {
  v1::Slowdown p;
  p.set_updated(v.updated);
  p.set_judged(v.judged);
  p.set_step_time_s(v.step_time_s);
  p.set_baseline_step_time_s(v.baseline_step_time_s);
  p.set_window_end(v.window_end);
  for (const Finding& f : v.slow) {
    v1::SlowFinding* x = p.add_slow();
    x->set_rank(f.scope == Scope::kRank ? f.rank : -1);
    x->set_node(f.node);
    x->set_peer(f.peer);
    for (int32_t r : f.ranks) x->add_ranks(r);
    x->set_cause(CauseName(f.cause));
    x->set_scope(ScopeName(f.scope));
    x->set_since(f.since);
    x->set_score(f.score);
    x->set_cost(f.cost);
    x->set_detail(f.detail);
  }
  for (const RankStatus& r : v.ranks) {
    v1::RankStep* x = p.add_ranks();
    x->set_rank(r.rank);
    x->set_node(r.node);
    x->set_step_time_s(r.step_time_s);
    x->set_score(r.score);
    x->set_individual(r.individual);
    x->set_steps(r.steps);
    x->set_slow(r.slow);
    if (r.slow) x->set_cause(CauseName(r.cause));
  }
  return p;
}

Verdict VerdictFromProto(const v1::Slowdown& p) {
  Verdict v;
  v.updated = p.updated();
  v.judged = p.judged();
  v.step_time_s = p.step_time_s();
  v.baseline_step_time_s = p.baseline_step_time_s();
  v.window_end = p.window_end();
  for (const v1::SlowFinding& x : p.slow()) {
    Finding f;
    if (!CauseOf(x.cause(), &f.cause) || !ScopeOf(x.scope(), &f.scope)) continue;
    f.rank = f.scope == Scope::kRank ? x.rank() : -1;
    f.node = Capped(x.node(), StepLimits::kMaxNode);
    f.peer = Capped(x.peer(), StepLimits::kMaxNode);
    f.ranks.assign(x.ranks().begin(), x.ranks().end());
    f.since = x.since();
    f.score = x.score();
    f.cost = x.cost();
    f.detail = Capped(x.detail(), 1024);
    v.slow.push_back(std::move(f));
  }
  for (const v1::RankStep& x : p.ranks()) {
    RankStatus r;
    r.rank = x.rank();
    r.node = Capped(x.node(), StepLimits::kMaxNode);
    r.step_time_s = x.step_time_s();
    r.score = x.score();
    r.individual = x.individual();
    r.steps = x.steps();
    r.slow = x.slow() && CauseOf(x.cause(), &r.cause);
    v.ranks.push_back(std::move(r));
  }
  return v;
}

}  // namespace xtimer::slowdown
