#include "netprobe/probe_rendezvous.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/clock.h"
#include "common/log.h"
#include "netprobe/early_stop.h"
#include "netprobe/messages.h"
#include "netprobe/plan.h"

namespace xtimer::netprobe {
namespace {

using nlohmann::json;

// Extra seconds the rendezvous waits beyond a node's own deadline before it gives up on it.
constexpr double kMargin = 3.0;
constexpr size_t kMaxUnjoined = 256;
constexpr size_t kMaxLocalEntries = 4096;
// A connection that has not joined yet may buffer no more than this: a join message is small.
constexpr size_t kMaxUnjoinedBytes = 64 << 10;

std::string Rank(int r) { return "node " + std::to_string(r); }

bool IsHex(const std::string& s) {
  return !s.empty() && s.size() % 2 == 0 &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

}  // namespace

Rendezvous::Rendezvous(const Options& options, net::Fd listen_fd, bool print_progress)
    : o_(options), listen_(std::move(listen_fd)), print_(print_progress) {}

Rendezvous::~Rendezvous() = default;

json Rendezvous::Run() {
  started_ = MonotonicS();
  const int n = o_.nnodes;
  inputs_.assign(n, NodeInput{});
  info_.assign(n, NodeInfo{});
  node_conn_.assign(n, nullptr);

  JoinPhase();
  std::vector<int> present;
  std::string missing;
  for (int r = 0; r < n; ++r) {
    if (inputs_[r].present) present.push_back(r);
    else missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  }
  phase_ = Phase::kLocal;
  Progress("rendezvous: " + std::to_string(present.size()) + " of " + std::to_string(n) + " nodes joined in " +
           std::to_string(static_cast<int>((MonotonicS() - started_) * 1000)) + " ms" +
           (missing.empty() ? "" : "; missing: " + missing) + "\n");
  if (o_.backend == Backend::kNccl) LocalPhase();

  phase_ = Phase::kRounds;
  // A node whose GPUs could not even be used (no GPU, no runtime) is faulty already and cannot
  // take part in an NCCL test: pair the others among themselves.
  present.erase(std::remove_if(present.begin(), present.end(),
                               [&](int r) { return inputs_[r].local.ran && !inputs_[r].local.ok; }),
                present.end());
  if (o_.all_pairs) {
    for (const RoundPlan& plan : AllPairsRounds(present)) RunRound(plan);
  } else {
    RoundPlan plan = NeighbourRound(present);
    if (!plan.steps.empty()) RunRound(plan);
  }
  const int follow_ups = o_.max_rounds > 0 ? o_.max_rounds - 1 : 9;
  for (int k = 0; k < follow_ups; ++k) {
    Verdict v = JudgeNow(false);
    if (v.undecided.empty() && v.recheck.empty()) break;
    std::optional<RoundPlan> plan = FollowUpRound(v, tests_);
    if (!plan) break;
    RunRound(*plan);
  }

  ReportInput in;
  in.options = o_;
  in.info = info_;
  in.inputs = inputs_;
  in.tests = tests_;
  in.rounds = rounds_;
  in.verdict = JudgeNow(true);
  in.probe_time_s = MonotonicS() - started_;
  json report = BuildReport(in);
  Finish(&report);
  return report;
}

void Rendezvous::JoinPhase() {
  net::Deadline deadline = net::Deadline::In(o_.timeout_s);
  auto joined = [&] {
    return std::count_if(inputs_.begin(), inputs_.end(), [](const NodeInput& i) { return i.present; });
  };
  while (joined() < o_.nnodes && !deadline.passed()) PollOnce(deadline);
}

void Rendezvous::LocalPhase() {
  local_pending_.clear();
  json msg = {{"type", "local"}, {"size", o_.size}, {"timeout", o_.timeout_s}};
  for (int r = 0; r < o_.nnodes; ++r)
    if (node_conn_[r] != nullptr && SendTo(r, msg)) local_pending_.push_back(r);
  net::Deadline deadline = net::Deadline::In(o_.timeout_s + kMargin);
  while (!local_pending_.empty() && !deadline.passed()) PollOnce(deadline);
  for (int r : local_pending_) {
    inputs_[r].local.ran = true;
    inputs_[r].local.ok = false;
    inputs_[r].local.error = "no result within the deadline";
  }
  local_pending_.clear();
  std::string text = "local GPU check:\n";
  for (int r = 0; r < o_.nnodes; ++r) {
    const LocalResult& l = inputs_[r].local;
    if (!l.ran) continue;
    text += "  node " + std::to_string(r) + ": ";
    if (!l.ok) {
      text += "FAILED: " + l.error + "\n";
      continue;
    }
    double h2d = -1, pair = -1;
    for (const auto& [gpu, mbps] : l.h2d_mbps) h2d = h2d < 0 ? mbps : std::min(h2d, mbps);
    for (const LocalResult::Pair& p : l.pairs) pair = pair < 0 ? p.mbps : std::min(pair, p.mbps);
    text += std::to_string(l.h2d_mbps.size()) + " GPU" + (l.h2d_mbps.size() == 1 ? "" : "s") +
            (h2d >= 0 ? ", host -> GPU " + FormatMbps(h2d) : std::string()) + ", " + std::to_string(l.pairs.size()) +
            " GPU pair" + (l.pairs.size() == 1 ? "" : "s") +
            (pair >= 0 ? " (slowest " + FormatMbps(pair) + ")" : std::string()) + "\n";
  }
  Progress(text);
}

void Rendezvous::RunRound(const RoundPlan& plan) {
  RoundRecord rr;
  rr.round = static_cast<int>(rounds_.size()) + 1;
  rr.plan = plan;
  double t0 = MonotonicS();
  for (size_t s = 0; s < plan.steps.size(); ++s)
    RunStep(plan.steps[s], rr.round, static_cast<int>(s) + 1, plan.base, &rr.tests);
  rr.elapsed_s = MonotonicS() - t0;
  rounds_.push_back(rr);
  Progress(RenderRound(rr, tests_, JudgeNow(false), ConfigOf(o_)));
}

json Rendezvous::TestMessage(const Pending& p, bool initiator, const std::string& uid) {
  const TestResult& t = tests_[p.test];
  int peer = initiator ? t.b : t.a;
  json m = {{"type", "test"},
            {"id", p.id},
            {"round", t.round},
            {"step", t.step},
            {"role", initiator ? "initiator" : "responder"},
            {"peer", peer},
            {"peer_addr", info_[peer].addr},
            {"peer_port", info_[peer].port},
            {"size", o_.size},
            {"streams", o_.streams},
            {"timeout", o_.timeout_s},
            {"connect_timeout", std::min(o_.connect_timeout_s, o_.timeout_s)}};
  if (!uid.empty()) m["uid"] = uid;
  return m;
}

void Rendezvous::RunStep(const Step& step, int round, int step_no, bool base, std::vector<int>* indices) {
  std::vector<uint64_t> ids;
  for (const Pair& pair : step) {
    TestResult t;
    t.a = pair.first;
    t.b = pair.second;
    t.round = round;
    t.step = step_no;
    t.base = base;
    int index = static_cast<int>(tests_.size());
    tests_.push_back(t);
    indices->push_back(index);
    for (int r : {t.a, t.b}) {
      if (node_conn_[r] == nullptr && tests_[index].error.empty())
        tests_[index].error = Rank(r) + " had left the rendezvous";
    }
    if (!tests_[index].error.empty()) continue;
    Pending p;
    p.test = index;
    p.id = next_id_++;
    p.need_uid = o_.backend == Backend::kNccl;
    p.deadline = net::Deadline::In(o_.timeout_s + kMargin);
    pending_[p.id] = p;
    ids.push_back(p.id);
  }
  // Tell the nodes (after registering, so that an early answer finds its test).
  for (uint64_t id : ids) {
    Pending& p = pending_[id];
    const TestResult& t = tests_[p.test];
    p.start_s = MonotonicS();
    if (!SendTo(t.a, TestMessage(p, true, ""))) {
      if (!p.done_a) p.error_a = Rank(t.a) + " could not be told to start the test";
      p.done_a = p.done_b = true;  // the responder was never told either
      continue;
    }
    if (!p.need_uid) SendTo(t.b, TestMessage(p, false, ""));
  }
  for (;;) {
    net::Deadline earliest = net::Deadline::In(3600);
    bool open = false;
    for (uint64_t id : ids) {
      auto it = pending_.find(id);
      if (it == pending_.end() || (it->second.done_a && it->second.done_b)) continue;
      open = true;
      earliest = net::Deadline::Earlier(earliest, it->second.deadline);
    }
    if (!open) break;
    StopSlowTests(ids);
    if (earliest.passed()) {
      for (uint64_t id : ids) {
        auto it = pending_.find(id);
        if (it == pending_.end() || !it->second.deadline.passed()) continue;
        Pending& p = it->second;
        const TestResult& t = tests_[p.test];
        std::string late = " sent no result within " + std::to_string(static_cast<int>(o_.timeout_s + kMargin)) + " s";
        if (!p.done_a) p.error_a = Rank(t.a) + (p.need_uid ? " sent no NCCL unique id in time" : late);
        if (!p.done_b) p.error_b = Rank(t.b) + late;
        p.done_a = p.done_b = true;
      }
      continue;
    }
    PollOnce(earliest);
  }
  for (uint64_t id : ids) {
    Pending p = pending_[id];
    pending_.erase(id);
    TestResult& t = tests_[p.test];
    if (t.completed) continue;  // the initiator measured it; the responder's word is not needed
    std::string error = p.error_a;
    if (!p.error_b.empty()) error += (error.empty() ? "" : "; ") + p.error_b;
    t.error = error.empty() ? "no result" : error;
  }
  Broadcast({{"type", "progress"}, {"text", ""}});  // keeps idle nodes' waits short
}

void Rendezvous::StopSlowTests(const std::vector<uint64_t>& ids) {
  if (!o_.early_stop || o_.backend != Backend::kTcp) return;  // an NCCL test cannot be stopped
  const double now = MonotonicS();
  std::vector<RunningTest> step;
  std::vector<Pending*> which;
  for (uint64_t id : ids) {
    auto it = pending_.find(id);
    if (it == pending_.end()) continue;
    Pending& p = it->second;
    const bool ended = p.done_a && p.done_b;
    if (ended && p.end_s == 0) p.end_s = now;
    RunningTest r;
    r.ended = ended;
    r.completed = tests_[p.test].completed;
    r.stopping = p.stopping;
    r.elapsed_s = (ended ? p.end_s : now) - p.start_s;
    step.push_back(r);
    which.push_back(&p);
  }
  for (size_t i : TestsToStop(step, o_.straggler_factor)) {
    Pending* p = which[i];
    p->stopping = true;
    SendTo(tests_[p->test].a, {{"type", "stop"}, {"id", p->id}});
  }
}

void Rendezvous::PollOnce(net::Deadline until) {
  std::vector<pollfd> pfds;
  pfds.push_back({listen_.get(), POLLIN, 0});
  for (auto& c : conns_) pfds.push_back({c->fd.get(), POLLIN, 0});
  int ms = std::min(until.poll_ms(), 200);
  int r = poll(pfds.data(), pfds.size(), ms);
  if (r < 0 && errno != EINTR) {
    Log(LogLevel::kError, "rendezvous: poll: %s", std::strerror(errno));
    return;
  }
  if (r > 0) {
    size_t existing = conns_.size();
    for (size_t i = 0; i < existing; ++i) {
      Conn* c = conns_[i].get();
      if (c->fd.valid() && pfds[i + 1].revents != 0) ReadFrom(c);
    }
    if (pfds[0].revents != 0) Accept();
  }
  for (auto& c : conns_) {
    if (c->fd.valid() && c->rank < 0 && phase_ != Phase::kDone && c->join_deadline.passed())
      Drop(c.get(), "sent no join message in time");
  }
  conns_.erase(std::remove_if(conns_.begin(), conns_.end(), [](const auto& c) { return !c->fd.valid(); }),
               conns_.end());
}

void Rendezvous::Accept() {
  for (;;) {
    int fd = accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    auto c = std::make_unique<Conn>();
    c->fd.reset(fd);
    c->peer = net::PeerString(fd);
    c->join_deadline = net::Deadline::In(o_.timeout_s);
    size_t unjoined = std::count_if(conns_.begin(), conns_.end(), [](const auto& x) { return x->rank < 0; });
    if (unjoined >= kMaxUnjoined || phase_ == Phase::kDone) {
      Log(LogLevel::kWarn, "rendezvous: refused a connection from %s (too many unjoined connections or finished)",
          c->peer.c_str());
      continue;
    }
    conns_.push_back(std::move(c));
  }
}

void Rendezvous::ReadFrom(Conn* c) {
  char buf[65536];
  for (;;) {
    ssize_t n = recv(c->fd.get(), buf, sizeof buf, 0);
    if (n > 0) {
      c->decoder.Feed(buf, static_cast<size_t>(n));
      if (c->rank < 0 && c->decoder.buffered() > kMaxUnjoinedBytes)
        return Drop(c, "sent " + std::to_string(c->decoder.buffered()) +
                           " bytes without joining (a join message is far smaller)");
      for (;;) {
        json msg;
        std::string error;
        FrameDecoder::Status s = c->decoder.Next(&msg, &error);
        if (s == FrameDecoder::Status::kNeedMore) break;
        if (s == FrameDecoder::Status::kError) return Drop(c, error);
        OnMessage(c, msg);
        if (!c->fd.valid()) return;
      }
      continue;
    }
    if (n == 0) {
      if (c->decoder.buffered() > 0) return Drop(c, "closed the connection in the middle of a message");
      return Drop(c, "closed the connection");
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    if (errno == EINTR) continue;
    return Drop(c, std::string("recv: ") + std::strerror(errno));
  }
}

void Rendezvous::OnMessage(Conn* c, const json& msg) {
  const std::string type = msg["type"].get<std::string>();
  if (phase_ == Phase::kDone) return;  // only goodbyes are expected now
  if (type == "join") return OnJoin(c, msg);
  if (c->rank < 0) return Drop(c, "sent '" + type + "' before joining");
  if (type == "result" && phase_ == Phase::kRounds) return OnResult(c, msg);
  if (type == "uid" && phase_ == Phase::kRounds) return OnUid(c, msg);
  if (type == "local_result" && phase_ == Phase::kLocal) return OnLocalResult(c, msg);
  Drop(c, "sent an unexpected message '" + type + "'");
}

void Rendezvous::OnJoin(Conn* c, const json& msg) {
  std::string error;
  Fields f(msg, &error);
  int version = 0, rank = 0, nnodes = 0, port = 0;
  std::string backend, host, addr;
  if (!f.Int("version", 0, 1 << 30, &version) || !f.Int("rank", -1, 1 << 30, &rank) ||
      !f.Int("nnodes", 1, 1 << 30, &nnodes) || !f.Str("backend", &backend, 16) || !f.Str("host", &host, 255) ||
      !f.Str("addr", &addr, 64) || !f.Int("port", 1, 65535, &port))
    return Drop(c, error);
  auto refuse = [&](const std::string& why) {
    std::string e;
    SendMessage(c->fd.get(), {{"type", "error"}, {"message", why}}, net::Deadline::In(1), &e);
    Drop(c, why);
  };
  if (c->rank >= 0) return Drop(c, "joined twice");
  if (version != kProtocolVersion)
    return refuse("protocol version " + std::to_string(version) + "; this rendezvous speaks " +
                  std::to_string(kProtocolVersion) + " (use the same xtimer_netprobe everywhere)");
  if (nnodes != o_.nnodes)
    return refuse("this rendezvous is for --nnodes " + std::to_string(o_.nnodes) + ", the node says " +
                  std::to_string(nnodes));
  if (backend != Name(o_.backend))
    return refuse("this rendezvous runs --backend " + std::string(Name(o_.backend)) + ", the node says " + backend);
  if (rank >= o_.nnodes)
    return refuse("--node-rank " + std::to_string(rank) + " is not below --nnodes " + std::to_string(o_.nnodes));
  if (phase_ != Phase::kJoin)
    return refuse("the probe started without this node after the join deadline (it is reported missing)");
  if (rank < 0) {
    for (int r = 0; r < o_.nnodes && rank < 0; ++r)
      if (!inputs_[r].present) rank = r;
    if (rank < 0) return refuse("all " + std::to_string(o_.nnodes) + " ranks are taken");
  }
  if (inputs_[rank].present)
    return refuse(Rank(rank) + " already joined from " + info_[rank].addr + " (host " + info_[rank].host +
                  "); give every node its own --node-rank");
  c->rank = rank;
  node_conn_[rank] = c;
  inputs_[rank].present = true;
  info_[rank] = NodeInfo{host, addr};
  info_[rank].port = port;
  SendTo(rank, {{"type", "welcome"}, {"rank", rank}, {"nnodes", o_.nnodes}});
}

void Rendezvous::OnResult(Conn* c, const json& msg) {
  std::string error;
  Fields f(msg, &error);
  int64_t id = 0;
  bool ok = false;
  if (!f.Int("id", 0, INT64_MAX, &id) || !f.Bool("ok", &ok)) return Drop(c, error);
  auto it = pending_.find(static_cast<uint64_t>(id));
  if (it == pending_.end()) return;  // a late result of a test already given up on
  Pending& p = it->second;
  TestResult& t = tests_[p.test];
  const bool is_a = c->rank == t.a;
  if (!is_a && c->rank != t.b) return Drop(c, "sent a result for a test it is not part of");
  std::string what;
  if (!ok && !f.Str("error", &what, 2048)) return Drop(c, error);
  bool stopped = false;
  if (ok && msg.contains("stopped") && !f.Bool("stopped", &stopped)) return Drop(c, error);
  if (is_a && ok && stopped) {
    if (!p.stopping) return Drop(c, "sent a stopped test it was not asked to stop");
    StoppedTransfer s;
    s.size = o_.size;
    double lat = 0;
    if (!f.Num("latency_us", &lat) || !f.Int("fwd_bytes", 0, INT64_MAX, &s.fwd_bytes) || !f.Num("fwd_s", &s.fwd_s) ||
        !f.Int("bwd_bytes", 0, INT64_MAX, &s.bwd_bytes) || !f.Num("bwd_s", &s.bwd_s))
      return Drop(c, error);
    if (lat < 0) return Drop(c, "sent a negative latency");
    TestResult figures = t;
    if (!PartialResult(s, MonotonicS() - p.start_s, &figures, &error)) return Drop(c, error);
    t = figures;
    t.latency_us = lat;
    t.extra.clear();
    if (!t.completed) p.error_a = Rank(t.a) + ": " + t.error;
    p.done_a = true;
    return;
  }
  if (is_a) {
    if (ok) {
      double time_s, fwd, bwd, lat;
      if (!f.Num("time_s", &time_s) || !f.Num("fwd_mbps", &fwd) || !f.Num("bwd_mbps", &bwd) ||
          !f.Num("latency_us", &lat))
        return Drop(c, error);
      if (time_s <= 0 || fwd < 0 || bwd < 0 || lat < 0) return Drop(c, "sent negative or zero figures");
      t.completed = true;
      t.time_s = time_s;
      t.fwd_mbps = fwd;
      t.bwd_mbps = bwd;
      t.latency_us = lat;
      t.extra.clear();
      auto extra = msg.find("extra");
      if (extra != msg.end() && extra->is_object()) {
        for (auto e = extra->begin(); e != extra->end() && t.extra.size() < 32; ++e)
          if (e->is_number() && e.key().size() < 64) t.extra.push_back({e.key(), e->get<double>()});
      }
    } else {
      p.error_a = Rank(t.a) + ": " + what;
      if (p.need_uid) p.done_b = true;  // the responder was never told to start
    }
    p.done_a = true;
  } else {
    if (!ok) p.error_b = Rank(t.b) + ": " + what;
    p.done_b = true;
  }
}

void Rendezvous::OnUid(Conn* c, const json& msg) {
  std::string error;
  Fields f(msg, &error);
  int64_t id = 0;
  std::string uid;
  if (!f.Int("id", 0, INT64_MAX, &id) || !f.Str("uid", &uid, 1024)) return Drop(c, error);
  if (!IsHex(uid)) return Drop(c, "sent a malformed NCCL unique id");
  auto it = pending_.find(static_cast<uint64_t>(id));
  if (it == pending_.end()) return;
  Pending& p = it->second;
  const TestResult& t = tests_[p.test];
  if (c->rank != t.a || !p.need_uid) return Drop(c, "sent a unique id it was not asked for");
  p.need_uid = false;
  p.deadline = net::Deadline::In(o_.timeout_s + kMargin);  // the responder starts only now
  SendTo(t.b, TestMessage(p, false, uid));
}

void Rendezvous::OnLocalResult(Conn* c, const json& msg) {
  std::string error;
  Fields f(msg, &error);
  bool ok = false;
  if (!f.Bool("ok", &ok)) return Drop(c, error);
  auto pos = std::find(local_pending_.begin(), local_pending_.end(), c->rank);
  if (pos == local_pending_.end()) return Drop(c, "sent a second local check result");
  LocalResult l;
  l.ran = true;
  l.ok = ok;
  if (!ok) {
    if (!f.Str("error", &l.error, 2048)) return Drop(c, error);
  } else {
    auto gpus = msg.find("gpus");
    auto pairs = msg.find("pairs");
    if (gpus == msg.end() || !gpus->is_array() || pairs == msg.end() || !pairs->is_array() ||
        gpus->size() > kMaxLocalEntries || pairs->size() > kMaxLocalEntries)
      return Drop(c, "message 'local_result': fields 'gpus' and 'pairs' must be short arrays");
    for (const json& g : *gpus) {
      json gm = g.is_object() ? g : json::object();
      gm["type"] = "local_result.gpus";
      Fields gf(gm, &error);
      int gpu = 0;
      double mbps = 0;
      if (!gf.Int("gpu", 0, 1 << 20, &gpu) || !gf.Num("h2d_mbps", &mbps)) return Drop(c, error);
      l.h2d_mbps.push_back({gpu, mbps});
    }
    for (const json& p : *pairs) {
      json pm = p.is_object() ? p : json::object();
      pm["type"] = "local_result.pairs";
      Fields pf(pm, &error);
      LocalResult::Pair lp;
      if (!pf.Int("src", 0, 1 << 20, &lp.src) || !pf.Int("dst", 0, 1 << 20, &lp.dst) || !pf.Num("mbps", &lp.mbps) ||
          !pf.Bool("peer_access", &lp.peer_access))
        return Drop(c, error);
      l.pairs.push_back(lp);
    }
  }
  inputs_[c->rank].local = l;
  local_pending_.erase(pos);
}

void Rendezvous::Drop(Conn* c, const std::string& why) {
  if (!c->fd.valid()) return;
  int rank = c->rank;
  c->fd.reset();
  if (rank >= 0 && node_conn_[rank] == c && phase_ == Phase::kDone) node_conn_[rank] = nullptr;
  if (phase_ == Phase::kDone) return;
  if (rank >= 0) {
    NodeLeft(rank, why);
  } else {
    Log(LogLevel::kWarn, "rendezvous: dropped a connection from %s: %s", c->peer.c_str(), why.c_str());
  }
}

void Rendezvous::NodeLeft(int rank, const std::string& why) {
  Conn* c = node_conn_[rank];
  node_conn_[rank] = nullptr;
  if (c != nullptr) c->fd.reset();
  if (phase_ == Phase::kJoin) {
    // Gone before the start: as if it had never come (it may come back).
    inputs_[rank].present = false;
    Log(LogLevel::kWarn, "rendezvous: %s left before the start: %s", Rank(rank).c_str(), why.c_str());
    return;
  }
  Log(LogLevel::kWarn, "rendezvous: %s left: %s", Rank(rank).c_str(), why.c_str());
  inputs_[rank].left_reason = "left the rendezvous during the probe: " + why;
  for (auto& [id, p] : pending_) {
    const TestResult& t = tests_[p.test];
    if (t.a == rank && !p.done_a) {
      p.done_a = true;
      p.error_a = Rank(rank) + " left the rendezvous";
      if (p.need_uid) p.done_b = true;  // the responder was never told to start
    }
    if (t.b == rank && !p.done_b) {
      p.done_b = true;
      p.error_b = Rank(rank) + " left the rendezvous";
    }
  }
  auto pos = std::find(local_pending_.begin(), local_pending_.end(), rank);
  if (pos != local_pending_.end()) local_pending_.erase(pos);
}

bool Rendezvous::SendTo(int rank, const json& msg) {
  Conn* c = node_conn_[rank];
  if (c == nullptr || !c->fd.valid()) return false;
  std::string error;
  if (SendMessage(c->fd.get(), msg, net::Deadline::In(o_.timeout_s), &error)) return true;
  Drop(c, error);
  return false;
}

void Rendezvous::Broadcast(const json& msg) {
  for (int r = 0; r < o_.nnodes; ++r)
    if (node_conn_[r] != nullptr) SendTo(r, msg);
}

void Rendezvous::Progress(const std::string& text) {
  if (print_) {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }
  Broadcast({{"type", "progress"}, {"text", text}});
}

Verdict Rendezvous::JudgeNow(bool final) { return Judge(inputs_, tests_, ConfigOf(o_), final); }

void Rendezvous::Finish(json* report) {
  Broadcast({{"type", "report"}, {"report", *report}});
  phase_ = Phase::kDone;
  for (auto& c : conns_)
    if (c->rank < 0) c->fd.reset();  // strangers get nothing and are not waited for
  // Let every node read the report before the connections close: half-close, then wait for
  // the nodes to hang up (bounded).
  for (auto& c : conns_)
    if (c->fd.valid()) shutdown(c->fd.get(), SHUT_WR);
  net::Deadline deadline = net::Deadline::In(std::min(5.0, o_.timeout_s + 1));
  while (!conns_.empty() && !deadline.passed()) PollOnce(deadline);
  conns_.clear();
}

}  // namespace xtimer::netprobe
