#include "netprobe/early_stop.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace xtimer::netprobe {

std::vector<size_t> TestsToStop(const std::vector<RunningTest>& step, double factor) {
  std::vector<double> done;
  for (const RunningTest& t : step)
    if (t.ended && t.completed) done.push_back(t.elapsed_s);
  std::vector<size_t> stop;
  if (done.empty()) return stop;
  const double limit = std::max(factor * Median(done), kMinStopS);
  for (size_t i = 0; i < step.size(); ++i) {
    if (step[i].ended) continue;
    if (step[i].elapsed_s <= limit) return {};  // it may still end in time: the step waits for it anyway
    if (!step[i].stopping) stop.push_back(i);
  }
  return stop;
}

namespace {

bool Check(int64_t bytes, double s, int64_t size, const char* dir, std::string* error) {
  if (bytes < 0 || bytes > size || !std::isfinite(s) || s < 0 || (bytes > 0 && s <= 0)) {
    *error = std::string("stopped test: ") + dir + " figures are not a transfer of " + std::to_string(size) + " bytes";
    return false;
  }
  return true;
}

std::string Mb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g MB", bytes / 1e6);
  return buf;
}

}  // namespace

bool PartialResult(const StoppedTransfer& s, double stopped_after_s, TestResult* t, std::string* error) {
  if (s.size <= 0) return (*error = "stopped test: no size"), false;
  if (!Check(s.fwd_bytes, s.fwd_s, s.size, "forward", error) || !Check(s.bwd_bytes, s.bwd_s, s.size, "backward", error))
    return false;
  char after[32];
  std::snprintf(after, sizeof after, "%.3g s", stopped_after_s);
  t->stopped = true;
  const bool fwd_ran = s.fwd_s > 0, bwd_ran = s.bwd_s > 0;
  if ((fwd_ran && s.fwd_bytes == 0) || (bwd_ran && s.bwd_bytes == 0) || (!fwd_ran && !bwd_ran)) {
    t->completed = false;
    const char* dir = fwd_ran && s.fwd_bytes == 0 ? "forward" : bwd_ran ? "backward" : "either way";
    t->error = std::string("stopped after ") + after + ": no byte moved " + dir;
    t->stop_note.clear();
    return true;
  }
  double fwd = fwd_ran ? static_cast<double>(s.fwd_bytes) / s.fwd_s : 0;
  double bwd = bwd_ran ? static_cast<double>(s.bwd_bytes) / s.bwd_s : 0;
  if (!fwd_ran) fwd = bwd;  // never started: taken at the other direction's rate
  if (!bwd_ran) bwd = fwd;
  t->completed = true;
  t->error.clear();
  t->fwd_mbps = fwd / 1e6;
  t->bwd_mbps = bwd / 1e6;
  t->time_s = static_cast<double>(s.size) / fwd + static_cast<double>(s.size) / bwd;
  t->stop_note =
      std::string("stopped after ") + after + ", rate from " + Mb(static_cast<double>(s.fwd_bytes)) + " forward" +
      (bwd_ran ? " and " + Mb(static_cast<double>(s.bwd_bytes)) + " backward" : "") +
      (fwd_ran && bwd_ran ? "" : std::string(", ") + (fwd_ran ? "backward" : "forward") + " taken at the same rate");
  return true;
}

}  // namespace xtimer::netprobe
