// The slowdown judge (slowdown/slowdown_judge.h) inside the collector core: agents' step records
// in (structs: the gRPC service converts its Steps calls' records at its edge, the node agent's
// embedded core gets them as they are), each checked here; an evaluation every
// XTIMER_SLOW_INTERVAL seconds (Tick), and what comes of it: out_dir/slowdown.json rewritten
// atomically, one log line when a slowdown starts and one when it ends, the sample requests for
// the agents of the ranks the judge wants Python samples of, and the latest verdict for /metrics,
// /status.json, the page and each agent's reply (with only that agent's ranks).
//
// Threads: any method from any thread. Its own mutexes, never held while the core's is taken:
// the judge's work (an evaluation of thousands of ranks) does not hold up Report calls.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "slowdown/slowdown_judge.h"
#include "slowdown/slowdown_verdict.h"

namespace xtimer::collector {

class SlowdownWatch {
 public:
  // `out_dir` empty: no file. `log`: the start and end lines.
  SlowdownWatch(const slowdown::JudgeOptions& options, std::string out_dir, bool write_file, bool log);

  // One agent's records, at `now` (unix s), each checked (CheckStepRecord). Returns how many
  // were refused (*first_error: why the first was).
  size_t Add(const std::string& session, std::vector<slowdown::StepRecord> records, double now,
             std::string* first_error);

  struct Sample {
    std::string session;  // the agent of the rank
    slowdown::SampleRequest request;
  };
  // Evaluates when one is due: writes the file, logs, returns the samples to ask for.
  std::vector<Sample> Tick(double now);

  // The latest verdict (a copy), and its ranks limited to those `session` sent records for.
  slowdown::Verdict Latest() const;
  // false (and *out untouched) before the first evaluation. *out has no events and no samples.
  bool LatestFor(const std::string& session, slowdown::Verdict* out) const;
  uint64_t evaluations() const { return evaluations_; }
  uint64_t accepted() const { return accepted_; }  // records taken
  uint64_t refused() const { return refused_; }    // records dropped

 private:
  const slowdown::JudgeOptions options_;
  const std::string path_;  // "" for none
  const bool log_;

  Mutex tick_mu_ XT_ACQUIRED_BEFORE(mu_);  // one Tick at a time (the file is written in evaluation order)
  mutable Mutex mu_;
  slowdown::Judge judge_ XT_GUARDED_BY(mu_);
  slowdown::Verdict latest_ XT_GUARDED_BY(mu_);
  slowdown::Verdict latest_findings_ XT_GUARDED_BY(mu_);  // latest_ without its ranks, events and samples
  std::map<int32_t, slowdown::RankStatus> latest_ranks_ XT_GUARDED_BY(mu_);
  std::map<int32_t, std::string> session_of_ XT_GUARDED_BY(mu_);  // the session that last sent a rank's records
  std::map<std::string, std::set<int32_t>> ranks_of_ XT_GUARDED_BY(mu_);
  double next_eval_ XT_GUARDED_BY(mu_) = 0;
  bool warned_write_ XT_GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> evaluations_{0}, accepted_{0}, refused_{0};  // read without the lock
};

}  // namespace xtimer::collector
