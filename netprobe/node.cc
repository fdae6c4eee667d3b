#include "netprobe/node.h"

#include <unistd.h>

#include <cstdio>
#include <deque>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/identity.h"
#include "common/log.h"
#include "common/net/net.h"
#include "netprobe/gpu_probe.h"
#include "netprobe/messages.h"
#include "netprobe/probe_rendezvous.h"
#include "netprobe/report.h"
#include "netprobe/tcp_probe.h"
#include "netprobe/wire.h"

namespace xtimer::netprobe {
namespace {

using nlohmann::json;

int Fail(const std::string& what) {
  std::fprintf(stderr, "xtimer_netprobe: %s\n", what.c_str());
  return 2;
}

// What NodeClient::Run returns when this node could not finish (never a rendezvous report).
json ErrorReport(const std::string& what) { return json{{"node_error", true}, {"error", what}}; }

void Print(const std::string& text) {
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

// Writes the report (with "self") to --json; false with a message on failure.
bool WriteReport(const Options& o, json report, int self) {
  if (o.json_path.empty()) return true;
  if (self >= 0) report["self"] = self;
  std::string error;
  if (!WriteFileAtomically(o.json_path, report.dump(2) + "\n", &error)) {
    std::fprintf(stderr, "xtimer_netprobe: cannot write --json %s: %s\n", o.json_path.c_str(), error.c_str());
    return false;
  }
  return true;
}

// One node's side of the probe. Run() returns the final report, or ErrorReport() when this
// node could not finish (nothing is printed on stderr: the caller says it its own way).
class NodeClient {
 public:
  explicit NodeClient(const Options& o) : o_(o) {}
  json Run();
  int rank() const { return rank_; }

 private:
  json Fail(const std::string& what) { return ErrorReport(what); }
  // "" when done, else why this node cannot go on.
  std::string HandleTest(const json& msg);
  // While this node initiates test `id`: reads one message of the rendezvous; a "stop" for
  // `id` asks the test to stop, anything else waits in inbox_ for the main loop.
  StopWatch::Answer ReadDuringTest(int64_t id, std::string* error);
  std::string HandleLocal(const json& msg);
  bool Send(const json& msg, std::string* error) {
    return SendMessage(rdzv_.get(), msg, net::Deadline::In(o_.timeout_s), error);
  }

  const Options& o_;
  net::Fd rdzv_;
  net::Fd probe_;
  int probe_port_ = 0;
  int rank_ = -1;
  std::deque<json> inbox_;  // messages that came during a test, in order
  std::string lost_;        // why the rendezvous connection became unusable during a test
};

json NodeClient::Run() {
  std::string error;
  probe_ = net::Listen("", &probe_port_, &error);
  if (!probe_.valid()) return Fail("cannot open the probe port: " + error);
  const std::string target = o_.rdzv_host + ":" + std::to_string(o_.rdzv_port);
  rdzv_ = net::Connect(o_.rdzv_host, o_.rdzv_port, net::Deadline::In(o_.timeout_s), &error);
  if (!rdzv_.valid())
    return Fail("cannot reach the rendezvous at " + target + " within --timeout " + std::to_string(o_.timeout_s) +
                " s: " + error);
  json join = {{"type", "join"},
               {"version", kProtocolVersion},
               {"rank", o_.node_rank},
               {"nnodes", o_.nnodes},
               {"backend", Name(o_.backend)},
               {"host", HostName()},
               {"addr", net::LocalHost(rdzv_.get())},
               {"port", probe_port_}};
  if (!Send(join, &error)) return Fail("rendezvous at " + target + ": " + error);

  // Between two messages of the rendezvous there is at most one step of tests (each bounded by
  // the timeout, twice for nccl) or the join phase; wait a little longer than that.
  const double idle_s = 3 * o_.timeout_s + 10;
  for (;;) {
    json msg;
    if (!inbox_.empty()) {
      msg = std::move(inbox_.front());
      inbox_.pop_front();
    } else if (!RecvMessage(rdzv_.get(), &msg, net::Deadline::In(idle_s), &error)) {
      return Fail("lost the rendezvous at " + target + ": " + error);
    }
    const std::string type = msg["type"].get<std::string>();
    Fields f(msg, &error);
    if (type == "error") {
      std::string m;
      return Fail("the rendezvous refused this node: " + (f.Str("message", &m) ? m : error));
    } else if (type == "welcome") {
      if (!f.Int("rank", 0, o_.nnodes - 1, &rank_)) return Fail("rendezvous: " + error);
      Log(LogLevel::kInfo, "joined the rendezvous at %s as node %d of %d", target.c_str(), rank_, o_.nnodes);
    } else if (type == "progress") {
      std::string text;
      if (!f.Str("text", &text, 1 << 20)) return Fail("rendezvous: " + error);
      if (!text.empty()) Print(text);
    } else if (type == "test") {
      if (std::string e = HandleTest(msg); !e.empty()) return Fail(e);
    } else if (type == "local") {
      if (std::string e = HandleLocal(msg); !e.empty()) return Fail(e);
    } else if (type == "stop") {
      // For a test that ended before the request arrived (or that was never ours to stop).
      int64_t id = 0;
      if (!f.Int("id", 0, INT64_MAX, &id)) return Fail("rendezvous: " + error);
    } else if (type == "report") {
      auto it = msg.find("report");
      if (it == msg.end() || !it->is_object()) return Fail("rendezvous: the report is malformed");
      Print(RenderTable(*it));
      return *it;
    } else {
      return Fail("rendezvous sent an unknown message '" + type + "'");
    }
  }
}

std::string NodeClient::HandleTest(const json& msg) {
  std::string error;
  Fields f(msg, &error);
  int64_t id = 0, size = 0;
  int peer = 0, port = 0, streams = 0;
  double timeout = 0;
  std::string role, addr, uid;
  if (!f.Int("id", 0, INT64_MAX, &id) || !f.Str("role", &role, 16) || !f.Int("peer", 0, o_.nnodes - 1, &peer) ||
      !f.Str("peer_addr", &addr, 64) || !f.Int("peer_port", 0, 65535, &port) ||
      !f.Int("size", 1, int64_t{1} << 40, &size) || !f.Int("streams", 1, 64, &streams) || !f.Num("timeout", &timeout) ||
      timeout <= 0 || (role != "initiator" && role != "responder"))
    return "rendezvous sent a bad test: " + (error.empty() ? "role '" + role + "'" : error);
  if (msg.contains("uid") && !f.Str("uid", &uid, 1024)) return "rendezvous: " + error;
  // A rendezvous that names no connect deadline (an older one) gives the whole deadline to it.
  double connect_timeout = timeout;
  if (msg.contains("connect_timeout") && (!f.Num("connect_timeout", &connect_timeout) || connect_timeout <= 0))
    return "rendezvous sent a bad test: " + (error.empty() ? "connect_timeout" : error);
  net::Deadline deadline = net::Deadline::In(timeout);
  net::Deadline connect_deadline = net::Deadline::Earlier(deadline, net::Deadline::In(connect_timeout));
  // The responder accepts a little longer than the initiator connects: the two were told to
  // start at slightly different moments.
  net::Deadline accept_deadline = net::Deadline::Earlier(deadline, net::Deadline::In(connect_timeout + 0.5));
  json result = {{"type", "result"}, {"id", id}};
  if (role == "initiator") {
    TestResult t;
    t.a = rank_;
    t.b = peer;
    if (o_.backend == Backend::kTcp) {
      TcpTestSpec spec{static_cast<uint64_t>(id), rank_, peer, size, streams};
      StopWatch stop{rdzv_.get(), [&](std::string* e) { return ReadDuringTest(id, e); }};
      StoppedTransfer partial;
      RunTcpInitiator(spec, addr, port, connect_deadline, deadline, stop, &t, &partial);
      if (!lost_.empty()) return lost_;  // this node cannot go on; the test's failure says no more
      if (t.stopped) {
        result["ok"] = true;
        result["stopped"] = true;
        result["latency_us"] = t.latency_us;
        result["fwd_bytes"] = partial.fwd_bytes;
        result["fwd_s"] = partial.fwd_s;
        result["bwd_bytes"] = partial.bwd_bytes;
        result["bwd_s"] = partial.bwd_s;
        if (!Send(result, &error)) return "lost the rendezvous: " + error;
        return "";
      }
    } else {
      auto send_uid = [&](const std::string& hex, std::string* e) {
        return Send({{"type", "uid"}, {"id", id}, {"uid", hex}}, e);
      };
      RunNcclInitiator(size, send_uid, deadline, &t);
    }
    result["ok"] = t.completed;
    if (t.completed) {
      result["time_s"] = t.time_s;
      result["fwd_mbps"] = t.fwd_mbps;
      result["bwd_mbps"] = t.bwd_mbps;
      result["latency_us"] = t.latency_us;
      json extra = json::object();
      for (const auto& [k, v] : t.extra) extra[k] = v;
      result["extra"] = extra;
    } else {
      result["error"] = t.error;
    }
  } else {
    bool ok;
    if (o_.backend == Backend::kTcp) {
      TcpTestSpec spec{static_cast<uint64_t>(id), rank_, peer, size, streams};
      ok = ServeTcpResponder(spec, probe_.get(), accept_deadline, deadline, &error);
    } else {
      ok = RunNcclResponder(size, uid, deadline, &error);
    }
    result["ok"] = ok;
    if (!ok) result["error"] = error;
  }
  if (!Send(result, &error)) return "lost the rendezvous: " + error;
  return "";
}

StopWatch::Answer NodeClient::ReadDuringTest(int64_t id, std::string* error) {
  json msg;
  std::string why;
  if (!RecvMessage(rdzv_.get(), &msg, net::Deadline::In(o_.timeout_s), &why)) {
    *error = lost_ = "lost the rendezvous: " + why;
    return StopWatch::Answer::kError;
  }
  if (msg["type"].get<std::string>() == "stop") {
    Fields f(msg, &why);
    int64_t stop_id = 0;
    if (!f.Int("id", 0, INT64_MAX, &stop_id)) {
      *error = lost_ = "rendezvous: " + why;
      return StopWatch::Answer::kError;
    }
    if (stop_id == id) return StopWatch::Answer::kStop;
    return StopWatch::Answer::kGoOn;  // for a test that is over
  }
  if (inbox_.size() >= 64) {
    *error = lost_ = "rendezvous sent " + std::to_string(inbox_.size()) + " messages during one test";
    return StopWatch::Answer::kError;
  }
  inbox_.push_back(std::move(msg));
  return StopWatch::Answer::kGoOn;
}

std::string NodeClient::HandleLocal(const json& msg) {
  std::string error;
  Fields f(msg, &error);
  int64_t size = 0;
  double timeout = 0;
  if (!f.Int("size", 1, int64_t{1} << 40, &size) || !f.Num("timeout", &timeout) || timeout <= 0)
    return "rendezvous sent a bad local check: " + error;
  LocalResult l = RunLocalGpuCheck(size, net::Deadline::In(timeout));
  json result = {{"type", "local_result"}, {"ok", l.ok}};
  if (!l.ok) {
    result["error"] = l.error;
  } else {
    json gpus = json::array(), pairs = json::array();
    for (const auto& [gpu, mbps] : l.h2d_mbps) gpus.push_back({{"gpu", gpu}, {"h2d_mbps", mbps}});
    for (const LocalResult::Pair& p : l.pairs)
      pairs.push_back({{"src", p.src}, {"dst", p.dst}, {"mbps", p.mbps}, {"peer_access", p.peer_access}});
    result["gpus"] = gpus;
    result["pairs"] = pairs;
  }
  if (!Send(result, &error)) return "lost the rendezvous: " + error;
  return "";
}

}  // namespace

bool RunNodeSide(const Options& options, json* report, std::string* error) {
  NodeClient client(options);
  json r = client.Run();
  if (r.value("node_error", false)) return (*error = r.value("error", "")), false;
  r["self"] = client.rank();
  *report = std::move(r);
  return true;
}

RendezvousThread::RendezvousThread() = default;
RendezvousThread::~RendezvousThread() { Wait(); }

bool RendezvousThread::Start(const Options& options, const std::string& host, int port, std::string* error) {
  port_ = port;
  net::Fd listen = net::Listen(host, &port_, error);
  if (!listen.valid()) return false;
  server_ = std::make_unique<Rendezvous>(options, std::move(listen), false);
  thread_ = std::thread([this] { report_ = server_->Run(); });
  return true;
}

json RendezvousThread::Wait() {
  if (thread_.joinable()) thread_.join();
  return report_;
}

int FailProbe(const Options& o, const std::string& what, int self) {
  Fail(what);
  ReportInput in;
  in.options = o;
  in.error = what;
  WriteReport(o, BuildReport(in), self);  // says so itself when it cannot
  return 2;
}

int RunNode(const Options& o) {
  // Node 0 hosts the rendezvous when its address is one of ours and the port is free.
  RendezvousThread server;
  int requested_rank = o.node_rank;
  if ((o.node_rank == 0 || o.node_rank < 0) && net::IsLocalAddress(o.rdzv_host)) {
    std::string error;
    if (server.Start(o, o.rdzv_host, o.rdzv_port, &error)) {
      requested_rank = 0;
    } else if (o.node_rank == 0) {
      Log(LogLevel::kInfo, "not hosting the rendezvous (%s); joining the one at %s:%d", error.c_str(),
          o.rdzv_host.c_str(), o.rdzv_port);
    }
  }
  Options mine = o;
  mine.node_rank = requested_rank;
  json report;
  std::string error;
  // RunNodeSide closes our rendezvous connection when it returns, so the server can finish.
  bool finished = RunNodeSide(mine, &report, &error);
  // Said at once, not after the rendezvous' deadlines; the report too, so that whoever reads
  // --json learns that the probe failed and why.
  int rc = finished ? 0 : FailProbe(o, error, requested_rank);
  server.Wait();
  if (!finished) return rc;
  if (!WriteReport(o, report, report["self"].get<int>())) return 2;
  return ExitCodeOf(report);
}

int RunServe(const Options& o) {
  int port = o.rdzv_port;
  std::string error;
  net::Fd listen = net::Listen(o.rdzv_host, &port, &error);
  if (!listen.valid())
    return FailProbe(o, "--serve cannot listen on " + o.rdzv_host + ":" + std::to_string(o.rdzv_port) + ": " + error);
  Log(LogLevel::kInfo, "rendezvous listening on %s:%d for %d nodes", o.rdzv_host.c_str(), port, o.nnodes);
  Rendezvous server(o, std::move(listen), true);
  json report = server.Run();
  Print(RenderTable(report));
  if (!WriteReport(o, report, -1)) return 2;
  return ExitCodeOf(report);
}

}  // namespace xtimer::netprobe
