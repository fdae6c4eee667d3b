// The node agent's part in finding ranks out of step (desync_watch.h): fingerprints from the
// rank channel's thread (also forwarded to the collector), verdicts on the main thread's tick, every rank's stacks as
// for a hang.
#include "common/clock.h"
#include "common/log.h"
#include "launcher/agent/node_agent.h"

namespace xtimer {

void NodeAgent::OnPrints(const nlohmann::json& msg) {
  std::string why;
  std::vector<desync::Fingerprint> kept;
  size_t bad = desync_.OnPrints(msg, static_cast<int64_t>(MonotonicNs() / 1000000), &why, &kept);
  // A remote collector compares the ranks of every node (the embedded one ignores them).
  if (link_ && !kept.empty()) link_->Prints(msg["rank"].get<int32_t>(), std::move(kept));
  if (bad == 0) return;
  const int64_t now = WallMs();
  int64_t last = prints_warned_ms_;
  if (now - last >= 60000 && prints_warned_ms_.compare_exchange_strong(last, now))
    Log(LogLevel::kWarn,
        "agent: rank %s sent %zu collective fingerprint(s) that cannot be used (%s); dropped (said once "
        "a minute)",
        msg.contains("rank") ? msg["rank"].dump().substr(0, 24).c_str() : "?", bad, why.c_str());
}

// Every ~200 ms (Tick): a decided mismatch is written and logged by the watch; here every rank
// of the node is asked for its stacks (as for a hang), and with XTIMER_DESYNC_ACTION=abort the
// first suspect is handed to xtimer_run as hung (FindHung) a second later, once the ranks have
// written their stacks, and xtimer_run restarts the workers.
void NodeAgent::CheckDesync() {
  std::vector<std::string> dirs;
  const int64_t now_ms = static_cast<int64_t>(MonotonicNs() / 1000000);
  auto found = desync_.Tick(now_ms, WallMs(), &dirs);
  desync_.AddSites(now_ms, static_cast<int64_t>(config_.dump_wait_s * 1000));
  if (found.empty()) return;
  OnDumpRequest("");
  if (!desync_.settings().abort) return;
  MutexLock lock(desync_mu_);
  if (desync_abort_rank_ >= 0 || found.front().suspects.empty()) return;
  desync_abort_rank_ = found.front().suspects.front();
  // The ranks answer the dump request within about 0.1 s (their link's tick): give them a second
  // before xtimer_run stops them.
  desync_abort_at_ms_ = static_cast<int64_t>(MonotonicNs() / 1000000) + 1000;
  desync_abort_why_ = "out of step (XTIMER_DESYNC_ACTION=abort): " + found.front().Line();
}

bool NodeAgent::FindDesyncAbort(int* rank, std::string* trigger) const {
  MutexLock lock(desync_mu_);
  if (desync_abort_rank_ < 0 || static_cast<int64_t>(MonotonicNs() / 1000000) < desync_abort_at_ms_) return false;
  *rank = desync_abort_rank_;
  *trigger = desync_abort_why_;
  return true;
}

void NodeAgent::ForgetDesync() {
  MutexLock lock(desync_mu_);
  desync_abort_rank_ = -1;
  desync_abort_why_.clear();
}

}  // namespace xtimer
