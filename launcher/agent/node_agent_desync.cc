// The node agent's part in finding ranks out of step (desync_watch.h): fingerprints from the
// rank channel's thread (also forwarded to the collector), verdicts on the main thread's tick, every rank's stacks as
// for a hang.
#include "common/clock.h"
#include "common/log.h"
#include "launcher/agent/node_agent.h"

namespace xtimer {
namespace {
constexpr size_t kMaxCommsKept = 4096;  // communicator ids remembered per round and of old rounds
}  // namespace

void NodeAgent::OnPrints(const nlohmann::json& msg) {
  std::string why;
  std::vector<desync::Fingerprint> kept;
  size_t bad = desync_.OnPrints(msg, static_cast<int64_t>(MonotonicNs() / 1000000), &why, &kept);
  // A remote collector compares the ranks of every node (the embedded one ignores them).
  if (!kept.empty()) {
    MutexLock lock(desync_mu_);
    for (const desync::Fingerprint& f : kept)
      if (round_comms_.size() < kMaxCommsKept) round_comms_.insert(f.comm);
  }
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
  if (found.front().suspects.empty()) return;
  AbortForDesync(found.front().suspects.front(), found.front().Line());
}

void NodeAgent::OnCollectorDesync(int32_t rank, const std::string& comm, const std::string& reason) {
  {
    MutexLock lock(desync_mu_);
    if (old_comms_.count(comm) && !round_comms_.count(comm)) {
      Log(LogLevel::kInfo, "agent: the collector's desync verdict is of an earlier round (%s); ignored",
          reason.c_str());
      return;
    }
  }
  Log(LogLevel::kWarn, "agent: the collector found ranks out of step: %s", reason.c_str());
  AbortForDesync(rank, reason);
}

// The first desync of a round, with XTIMER_DESYNC_ACTION=abort: its first suspect is handed to
// xtimer_run as hung once the ranks had a second to write their stacks (they answer the dump
// request within about 0.1 s, their link's tick). Under xtimer_launch it only reports.
void NodeAgent::AbortForDesync(int32_t rank, const std::string& line) {
  if (!desync_.settings().abort) return;
  MutexLock lock(desync_mu_);
  if (desync_abort_rank_ >= 0) return;
  desync_abort_rank_ = rank;
  desync_abort_at_ms_ = static_cast<int64_t>(MonotonicNs() / 1000000) + 1000;
  desync_abort_why_ = "out of step (XTIMER_DESYNC_ACTION=abort): " + line;
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
  if (old_comms_.size() + round_comms_.size() > kMaxCommsKept) old_comms_.clear();
  old_comms_.merge(round_comms_);
  round_comms_.clear();
}

}  // namespace xtimer
