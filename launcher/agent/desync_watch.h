// Ranks out of step, as the node agent sees them: the fingerprints of its ranks' collective
// calls (`prints` messages, docs/formats.md, "Agent channel") go into the pure comparison of
// common/desync/matcher.h; each mismatch it decides becomes a desync verdict at once:
// XTIMER_TIMELINE_PATH/desync-<time>/verdict.json ("kind": "desync", docs/formats.md) and one
// log line; the agent then takes every rank's stacks as for a hang and, with
// XTIMER_DESYNC_ACTION=abort, ends the ranks.
//
// Threads: OnPrints on the rank channel's thread, Tick on the agent's main thread; one lock
// (never held across a file write or a callback).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/desync/matcher.h"
#include "common/mutex.h"

namespace xtimer {

struct DesyncSettings {
  std::string timeline_path;  // XTIMER_TIMELINE_PATH ("" = no verdict file)
  bool abort = false;         // XTIMER_DESYNC_ACTION=abort
  static DesyncSettings FromEnv();
};

class DesyncWatch {
 public:
  explicit DesyncWatch(DesyncSettings settings) : settings_(std::move(settings)) {}

  // A rank's `prints` message. Calls that break the rules are dropped; *why names the first.
  // Returns how many were dropped. *kept, when given, gets the calls that were used (for the
  // collector, which compares the ranks of every node).
  size_t OnPrints(const nlohmann::json& msg, int64_t now_ms, std::string* why,
                  std::vector<desync::Fingerprint>* kept = nullptr) XT_EXCLUDES(mu_);

  // The mismatches decided by `now_ms`, each written as a verdict (its folder in *dirs) and
  // logged. Empty most of the time.
  std::vector<desync::Mismatch> Tick(int64_t now_ms, int64_t unix_ms, std::vector<std::string>* dirs) XT_EXCLUDES(mu_);

  // Every tick after a verdict: each rank of a verdict gets its Python frame from the stack file
  // it wrote since (the innermost frame of its main thread outside torch and xtimer: where the
  // rank is now); once all are read, or `wait_ms` after the verdict, verdict.json gets them under
  // "where", a side whose fingerprints carried no call site gets its first rank's (and so do its
  // suspects' frames), and a second log line says where each side is.
  void AddSites(int64_t now_ms, int64_t wait_ms) XT_EXCLUDES(mu_);

  // The innermost frame of `python` (root first) outside torch and xtimer, "func (file:line)".
  static std::string CallSite(const std::vector<struct PythonFrame>& python);

  const DesyncSettings& settings() const { return settings_; }

  // verdict.json of one mismatch (docs/formats.md, "Desync verdict").
  static std::string VerdictJson(const desync::Mismatch& m, int64_t unix_ms);

 private:
  const DesyncSettings settings_;
  struct Pending {
    std::string dir;
    desync::Mismatch m;
    int64_t unix_ms = 0, since_ms = 0;
    std::map<int32_t, std::string> sites;  // rank -> call site
  };
  Mutex mu_;
  desync::Matcher matcher_ XT_GUARDED_BY(mu_);
  std::vector<Pending> pending_;  // main thread only (Tick, AddSites)
};

}  // namespace xtimer
