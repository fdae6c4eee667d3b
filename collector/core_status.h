// What the collector shows of the whole job: its /metrics text (collector/README.md, "Metrics")
// and the status object behind /status.json and the page (status_page.h).
//
// The core copies what they need into a snapshot under its mutex (Take*Snapshot in
// collector_core.cc), and the text is built from the snapshot after the mutex is released:
// building 10,000 ranks' text must not hold Report calls up. The render functions have no state
// and may run on any thread; RoundsJson alone runs under the core's mutex (it reads the rounds'
// bookkeeping) and takes each open round's own lock for its count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "collector.pb.h"
#include "collector/collector_core.h"
#include "collector/dump_round.h"
#include "collector/upload_refusal.h"
#include "common/prometheus_text.h"
#include "slowdown/slowdown_verdict.h"

namespace xtimer::collector {

struct MetricsSnapshot {
  std::vector<v1::RankReport> reports;           // the ranks that reported, by rank
  std::vector<std::pair<int32_t, double>> ages;  // rank, seconds since heard from; one per report
  CoreCounters counters;
  uint64_t refused[kRefusalCount] = {};  // by Refusal
  size_t sessions = 0, connected = 0, active_rounds = 0;
  int32_t world = 0, last_round_missing = 0;
  bool hang_active = false;
  slowdown::Verdict slowdown;  // the latest (judged false before the first)
};

// Every rank's metrics (common/rank_metrics.h), its report age, and the collector's own.
void AppendCoreMetrics(const MetricsSnapshot& snapshot, PrometheusText* out);

struct StatusSnapshot {
  struct Row {
    int32_t rank = 0;
    bool reported = false;
    double age_s = 0;
    int64_t wall_ms = 0;
    v1::RankReport report;  // without its ops
  };
  std::string time;  // ISO 8601 UTC, now
  int32_t world = 0;
  size_t ranks_known = 0, connected = 0, sessions = 0;
  bool hang_active = false;
  double dump_wait_s = 0, stale_after_s = 0;
  std::vector<Row> rows;                    // by rank
  nlohmann::json rounds;                    // RoundsJson
  std::vector<v1::NodeEviction> evictions;  // nodes evicted as slow, newest first
  CoreCounters counters;
  slowdown::Verdict slowdown;
};

// Under the core's mutex: the rounds, newest first, as the status object lists them.
nlohmann::json RoundsJson(const std::deque<std::shared_ptr<DumpRound>>& rounds, double now);
// The status object (format "xtimer-collector-status", version 1): the job, ranks by state
// (folded), every rank (with its step time and slowdown score once judged), the rounds,
// counters, the slowdown verdict ("slowdown": slowdown.json without its ranks) and the nodes
// evicted as slow ("evictions", newest first).
nlohmann::json StatusJsonOf(const StatusSnapshot& snapshot);

// "2026-11-22T10:15:30.123Z"
std::string IsoUtcMs(int64_t unix_ms);

}  // namespace xtimer::collector
