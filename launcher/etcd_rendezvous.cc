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
//   P/rounds/R/master           "addr:port", put by group rank 0 of R.
//   P/rounds/R/done/<node>      the node's workers all succeeded (its leaving is not a loss).
//   P/waiting/<node>            under the node's lease: it came while R was running.
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

#include "common/log.h"
#include "launcher/etcd_client.h"
#include "launcher/rendezvous.h"

namespace xtimer::run {
namespace {

double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct State {
  int64_t round = 0;
  int restarts = 0;
  std::string reason;
  std::string raw;  // the value as stored, for compare-and-swap
};

bool ParseState(const std::string& raw, State* s) {
  try {
    nlohmann::json j = nlohmann::json::parse(raw);
    s->round = j.at("round").get<int64_t>();
    s->restarts = j.at("restarts").get<int>();
    s->reason = j.value("reason", "");
    s->raw = raw;
    return true;
  } catch (...) {
    return false;
  }
}

std::string StateValue(int64_t round, int restarts, const std::string& reason) {
  return nlohmann::json{{"round", round}, {"restarts", restarts}, {"reason", reason}}.dump();
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
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    node_id_ = std::string(host) + "-" + std::to_string(getpid()) + "-" + RandomHex();
    addr_ = LocalAddress(o);
  }

  ~EtcdRendezvous() override { Leave(); }

  bool Start(std::string* error) {
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
    double deadline = NowS() + o_.join_timeout_s;
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
        if (NowS() > deadline) return (*error = "no round took this node in within the join timeout"), false;
        WaitForChange(0.5);
        continue;
      }
      nlohmann::json me = {{"addr", addr_}, {"prev", prev_rank_}};
      if (!etcd_.Put(rp + "join/" + node_id_, me.dump(), lease_, error)) return false;
      int outcome = WaitForClose(st, deadline, round, error);
      if (outcome < 0) return false;
      if (outcome == 0) continue;  // the state moved on (or we were not taken): try again
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
    double now = NowS();
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
      std::string reason = "node " + current_.nodes[r] + " (group rank " + std::to_string(r) +
                           ") was lost: its etcd lease expired";
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
        double t = NowS();
        if (n >= o_.min_nodes && enough_since < 0) enough_since = t;
        if (n < o_.min_nodes) enough_since = -1;
        if (n >= o_.max_nodes || (enough_since >= 0 && t - enough_since >= o_.last_call_timeout_s)) {
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
      return etcd_.Put(rp + "master", addr_ + ":" + std::to_string(round->master_port), lease_, error);
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
      if (NowS() > deadline) return (*error = "group rank 0 did not publish the master address in time"), false;
      WaitForChange(0.05);
    }
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
};

}  // namespace

std::unique_ptr<Rendezvous> MakeEtcdRendezvous(const RunOptions& options, std::string* error) {
  auto r = std::make_unique<EtcdRendezvous>(options);
  if (!r->Start(error)) return nullptr;
  return r;
}

}  // namespace xtimer::run
