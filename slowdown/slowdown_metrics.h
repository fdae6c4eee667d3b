// The verdict as Prometheus series (collector/README.md and launcher/agent/README.md list them), added
// to the node agent's and the collector's /metrics:
//   xtimer_rank_step_seconds{rank,host}        median step time in the window
//   xtimer_rank_slow_score{rank,host}          own rate / the peers' (1: as fast as they are)
//   xtimer_rank_slow{rank,host,cause}          1 while a slowdown with this cause concerns the rank
//                                              (one series per cause, so none appears or vanishes)
//   xtimer_job_step_seconds, xtimer_job_baseline_step_seconds
//   xtimer_job_slow{cause}                     1 while the whole job is slow for this cause
//   xtimer_slowdowns_active                    slowdowns going on
// Nothing is added before the first judged window.
#pragma once

#include "common/prometheus_text.h"
#include "slowdown/slowdown_verdict.h"

namespace xtimer::slowdown {

void AppendSlowdownMetrics(const Verdict& v, PrometheusText* out);

}  // namespace xtimer::slowdown
