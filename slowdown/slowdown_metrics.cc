#include "slowdown/slowdown_metrics.h"

#include <string>

namespace xtimer::slowdown {

void AppendSlowdownMetrics(const Verdict& v, PrometheusText* out) {
  if (!v.judged) return;
  static const Cause kCauses[] = {Cause::kGpuCompute, Cause::kNetwork, Cause::kHost, Cause::kPythonGc,
                                  Cause::kDataLoading};
  out->Family("xtimer_rank_step_seconds", "gauge", "The rank's median step time over the slowdown judge's window");
  out->Family("xtimer_rank_slow_score", "gauge",
              "The rank's rate against its peers' (own work per step, waiting excluded); 1 = as fast as they are");
  out->Family("xtimer_rank_slow", "gauge", "1 while a slowdown with this cause concerns the rank");
  for (const RankStatus& r : v.ranks) {
    Labels who = {{"rank", std::to_string(r.rank)}, {"host", r.node}};
    out->Add("xtimer_rank_step_seconds", who, r.step_time_s);
    out->Add("xtimer_rank_slow_score", who, r.score);
    for (Cause c : kCauses) {
      Labels l = who;
      l.emplace_back("cause", CauseName(c));
      out->Add("xtimer_rank_slow", l, r.slow && r.cause == c ? 1 : 0);
    }
  }
  out->Family("xtimer_job_step_seconds", "gauge", "The job's step time: the median of its ranks'");
  out->Add("xtimer_job_step_seconds", {}, v.step_time_s);
  if (v.baseline_step_time_s > 0) {
    out->Family("xtimer_job_baseline_step_seconds", "gauge", "The job's best step time over the baseline period");
    out->Add("xtimer_job_baseline_step_seconds", {}, v.baseline_step_time_s);
  }
  out->Family("xtimer_job_slow", "gauge", "1 while the whole job is slow for this cause (no rank to blame)");
  for (Cause c : kCauses) {
    bool on = false;
    for (const Finding& f : v.slow) on |= f.scope == Scope::kJob && f.cause == c;
    out->Add("xtimer_job_slow", {{"cause", CauseName(c)}}, on ? 1 : 0);
  }
  out->Family("xtimer_slowdowns_active", "gauge", "Slowdowns going on (a rank, a node, a link or the job)");
  out->Add("xtimer_slowdowns_active", {}, static_cast<double>(v.slow.size()));
}

}  // namespace xtimer::slowdown
