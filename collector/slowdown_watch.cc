#include "collector/slowdown_watch.h"

#include <utility>

#include "common/atomic_file.h"
#include "common/log.h"
#include "slowdown/slowdown_verdict_json.h"

namespace xtimer::collector {

SlowdownWatch::SlowdownWatch(const slowdown::JudgeOptions& options, std::string out_dir, bool write_file, bool log)
    : options_(options),
      path_(write_file && !out_dir.empty() ? out_dir + "/slowdown.json" : ""),
      log_(log),
      judge_(options) {}

size_t SlowdownWatch::Add(const std::string& session, std::vector<slowdown::StepRecord> records, double now,
                          std::string* first_error) {
  std::string why;
  size_t bad = 0;
  std::erase_if(records, [&](slowdown::StepRecord& r) {
    if (slowdown::CheckStepRecord(&r, &why)) return false;
    if (bad++ == 0 && first_error != nullptr) *first_error = why;
    return true;
  });
  MutexLock lock(mu_);
  for (slowdown::StepRecord& r : records) {
    auto [it, fresh] = session_of_.try_emplace(r.rank, session);
    if (!fresh && it->second != session) {
      ranks_of_[it->second].erase(r.rank);
      it->second = session;
    }
    ranks_of_[session].insert(r.rank);
    judge_.Add(std::move(r), now);
  }
  accepted_ += records.size();
  refused_ += bad;
  return bad;
}

std::vector<SlowdownWatch::Sample> SlowdownWatch::Tick(double now) {
  std::vector<Sample> out;
  slowdown::Verdict v;
  MutexLock serial(tick_mu_);
  {
    MutexLock lock(mu_);
    if (now < next_eval_ || judge_.ranks() == 0) return out;
    next_eval_ = now + options_.interval_s;
    v = judge_.Evaluate(now);
    ++evaluations_;
    latest_ = v;
    latest_findings_ = v;
    latest_findings_.ranks.clear();
    latest_findings_.events.clear();
    latest_findings_.samples.clear();
    latest_ranks_.clear();
    for (const slowdown::RankStatus& r : v.ranks) latest_ranks_[r.rank] = r;
    for (const slowdown::SampleRequest& s : v.samples) {
      auto it = session_of_.find(s.rank);
      if (it != session_of_.end()) out.push_back(Sample{it->second, s});
    }
  }
  if (log_)
    for (const slowdown::SlowEvent& e : v.events)
      Log(e.started ? LogLevel::kWarn : LogLevel::kInfo, "%s", e.line.c_str());
  if (!path_.empty()) {
    std::string error;
    AtomicWrite how;
    how.sync = false;  // whole for readers is enough: rewritten every few seconds
    if (!WriteFileAtomically(path_, slowdown::VerdictText(v), &error, how)) {
      MutexLock lock(mu_);
      if (!warned_write_) Log(LogLevel::kWarn, "slowdown: %s (slowdown.json is not kept up to date)", error.c_str());
      warned_write_ = true;
    }
  }
  return out;
}

slowdown::Verdict SlowdownWatch::Latest() const {
  MutexLock lock(mu_);
  return latest_;
}

bool SlowdownWatch::LatestFor(const std::string& session, slowdown::Verdict* out) const {
  MutexLock lock(mu_);
  if (evaluations_ == 0) return false;
  *out = latest_findings_;
  auto mine = ranks_of_.find(session);
  if (mine != ranks_of_.end())
    for (int32_t r : mine->second) {
      auto it = latest_ranks_.find(r);
      if (it != latest_ranks_.end()) out->ranks.push_back(it->second);
    }
  return true;
}

}  // namespace xtimer::collector
