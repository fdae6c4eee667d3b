// Elastic rendezvous through etcd v3. Keys, all under P = /xtimer/run/<rdzv-id>/:
//
//   P/state                     {"round": R, "restarts": K, "reason": "..."}: the round the job is
//                               in (or going to). Moved on with compare-and-swap, so of several
//                               nodes asking at once exactly one bump happens.
//   P/rounds/R/join/<node>      {"addr": ..., "prev": <group rank in the last round or -1>}, under
//                               the node's lease: who came for round R.
//   P/rounds/R/closed           {"nodes": [...], "restarts": K}: created once (create-if-absent)
//                               when R closes: MAX nodes came, or MIN came and last_call_timeout
//                               passed since. A node's index is its group rank.
//   P/rounds/R/master           "addr:port", put by group rank 0 of R (not under its lease, so a
//                               node slow to read it still finds it after rank 0 finished and left).
//   P/rounds/R/done/<node>      the node's workers all succeeded (its leaving is not a loss).
//   P/waiting/<node>            under the node's lease: it came while R was running.
//
// With --network-check (network_check.h), after R closes and before any worker starts:
//   P/rounds/R/netcheck         "host:port" of the probe's rendezvous, put by group rank 0 of R.
//   P/rounds/R/netcheck_verdict {"nodes": [{"node", "fate", "status", "reason"}...],
//                               "probe_time_s", "error"?}: put by group rank 0 once the probe is
//                               over; every node of R acts on it (a node that could not reach the
//                               probe too). Written after the two below.
//   P/netcheck/passed/<node>    the node passed a check: it is not probed again in this run.
//   P/netcheck/excluded/<addr>  {"node", "round", "status", "reason"}: left out; a node with
//                               this address (--local-addr or host name) cannot join the run again.
// A round whose nodes all passed before is not probed. When nodes are left out, the others move
// P/state on with "expect": [the nodes that stay]; that round closes as soon as they are all in.
//
// Group ranks: a node of the last round keeps its rank if it is below the new size; the other
// nodes fill the free ranks in order (last round's rank, then arrival). A node lost (its lease
// expired), a node waiting while the round has room, a failure or a hang moves P/state on;
// a watch on P/state wakes every agent.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "common/clock.h"
#include "common/identity.h"
#include "common/log.h"
#include "launcher/run/etcd_client.h"
#include "launcher/run/network_check.h"
#include "launcher/run/round_rendezvous.h"
#include "netprobe/node.h"

namespace xtimer::run {
namespace {

struct State {
  int64_t round = 0;
  int restarts = 0;
  std::string reason;
  std::vector<std::string> expect;  // the round closes once these nodes are in (after a network check)
  std::string raw;                  // the value as stored, for compare-and-swap
};

bool ParseState(const std::string& raw, State* s) {
  try {
    nlohmann::json j = nlohmann::json::parse(raw);
    s->round = j.at("round").get<int64_t>();
    s->restarts = j.at("restarts").get<int>();
    s->reason = j.value("reason", "");
    s->expect = j.value("expect", std::vector<std::string>{});
    s->raw = raw;
    return true;
  } catch (...) {
    return false;
  }
}

std::string StateValue(int64_t round, int restarts, const std::string& reason,
                       const std::vector<std::string>& expect = {}) {
  nlohmann::json j = {{"round", round}, {"restarts", restarts}, {"reason", reason}};
  if (!expect.empty()) j["expect"] = expect;
  return j.dump();
}

std::string RandomHex() {
  std::random_device rd;
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", rd());
  return buf;
}

class EtcdRendezvous : public Rendezvous {
 public:
  EtcdRendezvous(const RunOptions& o) : o_(o), etcd_(o.rdzv_endpoint), prefix_("/xtimer/run/" + o.rdzv_id + "/") {
    node_id_ = HostName() + "-" + std::to_string(getpid()) + "-" + RandomHex();
    addr_ = LocalAddress(o);
  }

  ~EtcdRendezvous() override { Leave(); }

  bool Start(std::string* error) {
    if (o_.network_check && Excluded(error)) return false;
    int64_t lease = 0;
    if (!etcd_.GrantLease(static_cast<int64_t>(o_.lease_ttl_s + 0.5), &lease, error)) return false;
    lease_ = lease;
    keepalive_ = std::thread([this] { KeepAliveLoop(); });
    etcd_.Watch(prefix_ + "state", [this] {
      std::lock_guard<std::mutex> lock(mu_);
      changed_ = true;
      cv_.notify_all();
    });
    return true;
  }

  std::string Name() const override { return "etcd"; }

  bool Join(Round* round, std::string* error) override {
    double deadline = MonotonicS() + o_.join_timeout_s;
    bool said_waiting = false;
    for (;;) {
      State st;
      if (!ReadState(&st, error)) return false;
      if (st.restarts > o_.max_restarts) {
        *error = "the job failed: " + std::to_string(st.restarts) + " restart(s) used, more than --max-restarts " +
                 std::to_string(o_.max_restarts) + " (last: " + st.reason + ")";
        return false;
      }
      std::string rp = RoundPrefix(st.round);
      std::string closed_raw;
      bool closed = false;
      if (!etcd_.Get(rp + "closed", &closed_raw, &closed, error)) return false;
      if (closed) {
        // The round is running without us: wait for the next one (the running nodes see us and move on).
        if (!etcd_.Put(prefix_ + "waiting/" + node_id_, addr_, lease_, error)) return false;
        if (!said_waiting) {
          Log(LogLevel::kInfo, "run: round %lld is running; waiting to be taken into the next one",
              (long long)st.round);
          said_waiting = true;
        }
        if (MonotonicS() > deadline) return (*error = "no round took this node in within the join timeout"), false;
        WaitForChange(0.5);
        continue;
      }
      nlohmann::json me = {{"addr", addr_}, {"prev", prev_rank_}};
      if (!etcd_.Put(rp + "join/" + node_id_, me.dump(), lease_, error)) return false;
      int outcome = WaitForClose(st, deadline, round, error);
      if (outcome < 0) return false;
      if (outcome == 0) continue;  // the state moved on (or we were not taken): try again
      if (o_.network_check) {
        outcome = NetworkCheck(st, *round, error);
        if (outcome < 0) return false;
        if (outcome == 0) {  // nodes were left out, or the check's host was lost: a new round
          prev_rank_ = round->group_rank;
          continue;
        }
      }
      std::string ignored;
      etcd_.Delete(prefix_ + "waiting/" + node_id_, &ignored);
      prev_rank_ = round->group_rank;
      current_ = *round;
      state_ = st;
      last_check_s_ = 0;
      return true;
    }
  }

  bool NewRoundNeeded(std::string* why) override {
    bool changed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      changed = changed_;
      changed_ = false;
    }
    std::string error;
    if (changed) {
      State st;
      if (ReadState(&st, &error) && st.round != current_.number) return (*why = st.reason), true;
    }
    // Membership, once a second: lost nodes and nodes waiting to come in.
    double now = MonotonicS();
    if (now - last_check_s_ < 1.0) return false;
    last_check_s_ = now;
    std::string rp = RoundPrefix(current_.number);
    std::vector<KeyValue> joined, done, waiting;
    if (!etcd_.GetPrefix(rp + "join/", &joined, &error) || !etcd_.GetPrefix(rp + "done/", &done, &error) ||
        !etcd_.GetPrefix(prefix_ + "waiting/", &waiting, &error)) {
      Log(LogLevel::kWarn, "run: %s", error.c_str());
      return false;
    }
    std::set<std::string> present;
    for (const KeyValue& kv : joined) present.insert(kv.key.substr(kv.key.rfind('/') + 1));
    for (const KeyValue& kv : done) present.insert(kv.key.substr(kv.key.rfind('/') + 1));
    for (size_t r = 0; r < current_.nodes.size(); ++r) {
      if (present.count(current_.nodes[r])) continue;
      std::string reason =
          "node " + current_.nodes[r] + " (group rank " + std::to_string(r) + ") was lost: its etcd lease expired";
      return Bump(reason, false, why);
    }
    if (!waiting.empty() && current_.group_world_size < o_.max_nodes) {
      std::string reason = std::to_string(waiting.size()) + " new node(s) waiting to join";
      return Bump(reason, false, why);
    }
    return false;
  }

  void RequestRestart(const std::string& why) override {
    std::string ignored;
    Bump(why, true, &ignored);
  }

  void Finished() override {
    std::string error;
    if (!etcd_.Put(RoundPrefix(current_.number) + "done/" + node_id_, "1", 0, &error))
      Log(LogLevel::kWarn, "run: %s", error.c_str());
  }

  void Leave() override {
    if (left_.exchange(true)) return;
    stop_ = true;
    cv_.notify_all();
    if (keepalive_.joinable()) keepalive_.join();
    etcd_.StopWatch();
    std::string error;
    if (lease_ != 0) etcd_.RevokeLease(lease_, &error);
  }

 private:
  std::string RoundPrefix(int64_t r) const { return prefix_ + "rounds/" + std::to_string(r) + "/"; }

  bool ReadState(State* st, std::string* error) {
    std::string raw;
    bool found = false;
    if (!etcd_.Get(prefix_ + "state", &raw, &found, error)) return false;
    if (!found) {
      bool created = false;
      if (!etcd_.CreateIfAbsent(prefix_ + "state", StateValue(0, 0, "start"), 0, &created, error)) return false;
      if (!etcd_.Get(prefix_ + "state", &raw, &found, error)) return false;
    }
    if (!ParseState(raw, st)) {
      *error = "etcd key " + prefix_ + "state is not xtimer_run's (" + raw.substr(0, 80) +
               "); another program uses --rdzv-id " + o_.rdzv_id + ": choose another id";
      return false;
    }
    return true;
  }

  // Moves the job to the next round (once, whoever asks first). True with the reason that won.
  bool Bump(const std::string& reason, bool restart, std::string* why) {
    std::string error;
    State st = state_;
    std::string next = StateValue(st.round + 1, st.restarts + (restart ? 1 : 0), reason);
    bool swapped = false;
    if (!etcd_.CompareAndSwap(prefix_ + "state", st.raw, next, &swapped, &error)) {
      Log(LogLevel::kWarn, "run: cannot ask for a new round: %s", error.c_str());
      return false;
    }
    if (swapped) return (*why = reason), true;
    State now;
    if (ReadState(&now, &error) && now.round != current_.number) return (*why = now.reason), true;
    return false;
  }

  void WaitForChange(double s) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double>(s), [this] { return changed_ || stop_; });
    changed_ = false;
  }

  // 1: the round closed with us in it (*round filled); 0: start over; -1: give up (*error).
  int WaitForClose(const State& st, double deadline, Round* round, std::string* error) {
    std::string rp = RoundPrefix(st.round);
    double enough_since = -1;
    for (;;) {
      State now;
      if (!ReadState(&now, error)) return -1;
      if (now.round != st.round) return 0;
      std::string closed_raw;
      bool closed = false;
      if (!etcd_.Get(rp + "closed", &closed_raw, &closed, error)) return -1;
      if (!closed) {
        std::vector<KeyValue> joined;
        if (!etcd_.GetPrefix(rp + "join/", &joined, error)) return -1;
        int n = static_cast<int>(joined.size());
        double t = MonotonicS();
        if (n >= o_.min_nodes && enough_since < 0) enough_since = t;
        if (n < o_.min_nodes) enough_since = -1;
        // After a network check left nodes out, the nodes that stay need not wait for them.
        bool expected_in = !now.expect.empty() && n >= o_.min_nodes;
        for (const std::string& id : now.expect) {
          bool in = false;
          for (const KeyValue& kv : joined) in = in || kv.key.substr(kv.key.rfind('/') + 1) == id;
          expected_in = expected_in && in;
        }
        if (n >= o_.max_nodes || expected_in || (enough_since >= 0 && t - enough_since >= o_.last_call_timeout_s)) {
          bool created = false;
          if (!etcd_.CreateIfAbsent(rp + "closed", CloseValue(joined, now.restarts), 0, &created, error)) return -1;
          continue;
        }
        if (t > deadline) {
          *error = "only " + std::to_string(n) + " of at least " + std::to_string(o_.min_nodes) +
                   " node(s) joined rendezvous '" + o_.rdzv_id + "' at " + o_.rdzv_endpoint + " within " +
                   std::to_string(static_cast<int>(o_.join_timeout_s)) + " s (--rdzv-conf join_timeout)";
          return -1;
        }
        WaitForChange(0.1);
        continue;
      }
      nlohmann::json c;
      try {
        c = nlohmann::json::parse(closed_raw);
      } catch (...) {
        *error = "etcd key " + rp + "closed is not valid JSON";
        return -1;
      }
      std::vector<std::string> nodes = c.value("nodes", std::vector<std::string>{});
      auto me = std::find(nodes.begin(), nodes.end(), node_id_);
      if (me == nodes.end()) return 0;  // closed without us: we wait for the next round
      round->number = st.round;
      round->restarts = c.value("restarts", 0);
      round->group_rank = static_cast<int>(me - nodes.begin());
      round->group_world_size = static_cast<int>(nodes.size());
      round->nodes = nodes;
      return MasterOf(rp, round, deadline, error) ? 1 : -1;
    }
  }

  // Group rank 0 publishes the master; the others read it.
  bool MasterOf(const std::string& rp, Round* round, double deadline, std::string* error) {
    if (round->group_rank == 0) {
      round->master_addr = addr_;
      round->master_port = FreePort();
      // Not under our lease: when this node's workers finish at once and it leaves, a node still
      // reading the master must find it (it belongs to this round only, so it never misleads).
      return etcd_.Put(rp + "master", addr_ + ":" + std::to_string(round->master_port), 0, error);
    }
    for (;;) {
      std::string v;
      bool found = false;
      if (!etcd_.Get(rp + "master", &v, &found, error)) return false;
      size_t colon = v.rfind(':');
      if (found && colon != std::string::npos) {
        round->master_addr = v.substr(0, colon);
        round->master_port = std::atoi(v.c_str() + colon + 1);
        return true;
      }
      if (MonotonicS() > deadline) return (*error = "group rank 0 did not publish the master address in time"), false;
      WaitForChange(0.05);
    }
  }

  // True (with *error) when a network check of this run left out this node's address.
  bool Excluded(std::string* error) {
    std::string raw, ignored;
    bool found = false;
    if (!etcd_.Get(prefix_ + "netcheck/excluded/" + addr_, &raw, &found, &ignored) || !found) return false;
    std::string why = raw;
    try {
      nlohmann::json j = nlohmann::json::parse(raw);
      why = j.value("status", "") + " in round " + std::to_string(j.value("round", 0)) + ": " + j.value("reason", "");
    } catch (...) {
    }
    *error = "this node (" + addr_ + ") was left out of run '" + o_.rdzv_id + "' by the network check (" + why +
             "); it cannot join this run again: repair it and start the job under a new --rdzv-id";
    return true;
  }

  // Waits for `key` while round `round` (of state `st`) runs its network check. 1 with *value;
  // 0 when the job moved to another round meanwhile or group rank 0, the check's host, was lost
  // (this node then moves the state on); -1 with *error after `limit_s` or when etcd fails.
  int WaitForKey(const std::string& key, const State& st, const Round& round, double limit_s, std::string* value,
                 std::string* error) {
    const double until = MonotonicS() + limit_s;
    double next_host_check = MonotonicS() + 1;
    for (;;) {
      bool found = false;
      if (!etcd_.Get(key, value, &found, error)) return -1;
      if (found) return 1;
      State now;
      if (!ReadState(&now, error)) return -1;
      if (now.round != st.round) return 0;
      if (MonotonicS() >= next_host_check) {
        next_host_check = MonotonicS() + 1;
        std::string ignored;
        bool alive = false;
        if (!etcd_.Get(RoundPrefix(round.number) + "join/" + round.nodes[0], &ignored, &alive, error)) return -1;
        if (!alive) {
          std::string reason = "node " + round.nodes[0] +
                               " (group rank 0) was lost during the network check: its "
                               "etcd lease expired";
          bool swapped = false;
          etcd_.CompareAndSwap(prefix_ + "state", st.raw, StateValue(st.round + 1, st.restarts, reason), &swapped,
                               error);
          Log(LogLevel::kWarn, "run: %s", reason.c_str());
          return 0;
        }
      }
      if (MonotonicS() > until) {
        *error = "group rank 0 did not put etcd key " + key + " within " + std::to_string(static_cast<int>(limit_s)) +
                 " s of the network check";
        return -1;
      }
      WaitForChange(0.1);
    }
  }

  // The network check of round `round`, just closed (state `st`): network_check.h, keys above.
  // 1: the workers start; 0: a new round (nodes were left out, or the check's host was lost);
  // -1 with *error: this node was left out, or etcd failed.
  int NetworkCheck(const State& st, const Round& round, std::string* error) {
    const int n = round.group_world_size;
    const std::string rp = RoundPrefix(round.number);
    if (n < 2) {
      if (!said_alone_)
        Log(LogLevel::kInfo, "run: --network-check: round %lld has one node, nobody to probe it with",
            (long long)round.number);
      said_alone_ = true;
      return 1;
    }
    std::vector<KeyValue> passed;
    if (!etcd_.GetPrefix(prefix_ + "netcheck/passed/", &passed, error)) return -1;
    std::set<std::string> ok;
    for (const KeyValue& kv : passed) ok.insert(kv.key.substr(kv.key.rfind('/') + 1));
    if (std::all_of(round.nodes.begin(), round.nodes.end(), [&](const std::string& id) { return ok.count(id); })) {
      Log(LogLevel::kInfo, "run: network check: the %d nodes of round %lld all passed it before; not probed again", n,
          (long long)round.number);
      return 1;
    }
    const ProbeSettings settings = ProbeSettingsFromEnv(o_.exclude_straggler);
    // Between two messages the probe waits at most 3 deadlines + 10 s; ten rounds at most.
    const double verdict_limit = 10 * (3 * settings.timeout_s + 10) + 30;
    const double t0 = MonotonicS();
    Log(LogLevel::kInfo, "run: network check of round %lld: %d nodes, %lld bytes per test, %g s deadlines",
        (long long)round.number, n, (long long)settings.size, settings.timeout_s);
    std::string verdict_raw;
    if (round.group_rank == 0) {
      nlohmann::json report, full;
      std::string perr;
      netprobe::RendezvousThread host;
      if (!host.Start(ProbeOptions(settings, "", 0, 0, n), "", 0, &perr)) {
        full = {{"error", "group rank 0 cannot host the probe: " + perr}};
      } else {
        if (!etcd_.Put(rp + "netcheck", JoinHostPort(addr_, host.port()), lease_, error)) return -1;
        if (!RunProbeNode(settings, addr_, host.port(), 0, n, &report, &perr))
          Log(LogLevel::kWarn, "run: network check: this node's side of the probe failed: %s", perr.c_str());
        full = host.Wait();
      }
      RoundVerdict v = JudgeRound(full, n, o_.exclude_straggler);
      std::map<std::string, std::string> addr_of;
      std::vector<KeyValue> joined;
      if (!etcd_.GetPrefix(rp + "join/", &joined, error)) return -1;
      for (const KeyValue& kv : joined) {
        try {
          addr_of[kv.key.substr(kv.key.rfind('/') + 1)] = nlohmann::json::parse(kv.value).value("addr", "");
        } catch (...) {
        }
      }
      // The passed and excluded keys first: a node that sees the verdict sees them too.
      for (int r = 0; r < n; ++r) {
        const std::string& id = round.nodes[r];
        const NodeFate& f = v.nodes[r];
        if (f.fate == Fate::kPassed &&
            !etcd_.Put(prefix_ + "netcheck/passed/" + id, std::to_string(round.number), 0, error))
          return -1;
        std::string addr = addr_of.count(id) && !addr_of[id].empty() ? addr_of[id] : id;
        nlohmann::json ex = {{"node", id}, {"round", round.number}, {"status", f.status}, {"reason", f.reason}};
        if (f.fate == Fate::kExcluded && !etcd_.Put(prefix_ + "netcheck/excluded/" + addr, ex.dump(), 0, error))
          return -1;
      }
      verdict_raw = v.ToJson(round.nodes).dump();
      if (!etcd_.Put(rp + "netcheck_verdict", verdict_raw, 0, error)) return -1;
    } else {
      std::string where, host;
      int port = 0;
      int w = WaitForKey(rp + "netcheck", st, round, 60, &where, error);
      if (w <= 0) return w;
      if (!SplitProbeAddress(where, &host, &port))
        return (*error = "etcd key " + rp + "netcheck is not host:port (" + where.substr(0, 80) + ")"), -1;
      nlohmann::json report;
      std::string perr;
      if (!RunProbeNode(settings, host, port, round.group_rank, n, &report, &perr))
        Log(LogLevel::kWarn, "run: network check: this node could not take part in the probe on group rank 0 (%s): %s",
            where.c_str(), perr.c_str());
      w = WaitForKey(rp + "netcheck_verdict", st, round, verdict_limit, &verdict_raw, error);
      if (w <= 0) return w;
    }
    RoundVerdict v;
    std::string perr;
    nlohmann::json vj = nlohmann::json::parse(verdict_raw, nullptr, false);
    if (!RoundVerdict::FromJson(vj, n, &v, &perr)) return (*error = "etcd key " + rp + "netcheck_verdict: " + perr), -1;
    const std::string summary = v.Summary();
    if (!v.error.empty()) {
      Log(LogLevel::kWarn, "run: network check of round %lld could not be done (%s); the workers start unchecked",
          (long long)round.number, summary.c_str());
      return 1;
    }
    Log(LogLevel::kInfo, "run: network check of round %lld: verdict after %.2f s: %s", (long long)round.number,
        MonotonicS() - t0, summary.c_str());
    const NodeFate& me = v.nodes[round.group_rank];
    if (me.fate == Fate::kExcluded) {
      *error = "left out by the network check of round " + std::to_string(round.number) + ": this node (group rank " +
               std::to_string(round.group_rank) + ", " + addr_ + ") is " + me.status + ": " + me.reason;
      return -1;
    }
    if (me.status == "straggler")
      Log(LogLevel::kWarn, "run: this node is a straggler (%s); it stays (--exclude-straggler would leave it out)",
          me.reason.c_str());
    std::vector<int> out = v.Excluded();
    if (out.empty()) return 1;
    std::vector<std::string> stay;
    std::string names;
    for (int r = 0; r < n; ++r) {
      if (v.nodes[r].fate != Fate::kExcluded) stay.push_back(round.nodes[r]);
      else names += (names.empty() ? "" : ", ") + round.nodes[r] + " (" + v.nodes[r].status + ")";
    }
    std::string reason = std::to_string(out.size()) + " node(s) left out by the network check of round " +
                         std::to_string(round.number) + ": " + names;
    bool swapped = false;
    std::string ignored;
    etcd_.CompareAndSwap(prefix_ + "state", st.raw, StateValue(st.round + 1, st.restarts, reason, stay), &swapped,
                         &ignored);
    Log(LogLevel::kInfo, "run: %s; the %zu other node(s) go to a new round without them", reason.c_str(), stay.size());
    return 0;
  }

  // The closed round: who is in it, in group-rank order.
  std::string CloseValue(const std::vector<KeyValue>& joined, int restarts) const {
    struct Cand {
      std::string id;
      int prev;
      int64_t arrived;
    };
    std::vector<Cand> c;
    for (const KeyValue& kv : joined) {
      int prev = -1;
      try {
        prev = nlohmann::json::parse(kv.value).value("prev", -1);
      } catch (...) {
      }
      c.push_back({kv.key.substr(kv.key.rfind('/') + 1), prev, kv.create_revision});
    }
    // Nodes of the last round first (by their rank), then newcomers by arrival.
    std::sort(c.begin(), c.end(), [](const Cand& a, const Cand& b) {
      if ((a.prev < 0) != (b.prev < 0)) return a.prev >= 0;
      if (a.prev != b.prev) return a.prev < b.prev;
      return a.arrived < b.arrived;
    });
    if (c.size() > static_cast<size_t>(o_.max_nodes)) c.resize(o_.max_nodes);
    size_t n = c.size();
    std::vector<std::string> slots(n);
    std::vector<const Cand*> rest;
    for (const Cand& x : c) {
      if (x.prev >= 0 && static_cast<size_t>(x.prev) < n && slots[x.prev].empty()) slots[x.prev] = x.id;
      else rest.push_back(&x);
    }
    size_t k = 0;
    for (std::string& s : slots)
      if (s.empty()) s = rest[k++]->id;
    return nlohmann::json{{"nodes", slots}, {"restarts", restarts}}.dump();
  }

  void KeepAliveLoop() {
    double period = std::max(0.5, o_.lease_ttl_s / 3);
    while (!stop_) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::duration<double>(period), [this] { return stop_.load(); });
      }
      if (stop_) return;
      std::string error;
      if (etcd_.KeepAlive(lease_, &error)) continue;
      Log(LogLevel::kWarn, "run: %s", error.c_str());
      // The lease expired (this node was silent too long): the others have dropped us. A new
      // lease lets the next Join come back.
      int64_t lease = 0;
      if (error.find("expired") != std::string::npos &&
          etcd_.GrantLease(static_cast<int64_t>(o_.lease_ttl_s + 0.5), &lease, &error))
        lease_ = lease;
    }
  }

  RunOptions o_;
  EtcdClient etcd_;
  std::string prefix_, node_id_, addr_;
  std::atomic<int64_t> lease_{0};
  std::thread keepalive_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool changed_ = false;
  std::atomic<bool> stop_{false}, left_{false};
  int prev_rank_ = -1;
  Round current_;
  State state_;
  double last_check_s_ = 0;
  bool said_alone_ = false;
};

}  // namespace

std::unique_ptr<Rendezvous> MakeEtcdRendezvous(const RunOptions& options, std::string* error) {
  auto r = std::make_unique<EtcdRendezvous>(options);
  if (!r->Start(error)) return nullptr;
  return r;
}

}  // namespace xtimer::run
