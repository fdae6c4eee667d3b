// Prometheus metrics of ranks, from their reports (the same for the node agent's /metrics and
// the collector's whole-job /metrics). Names and labels: collector/README.md, "Metrics".
#pragma once

#include <vector>

#include "collector.pb.h"
#include "common/prometheus_text.h"

namespace xtimer {

void AppendRankMetrics(const std::vector<v1::RankReport>& reports, PrometheusText* out);

}  // namespace xtimer
