#include "preload/link/agent_link.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/clock.h"
#include "common/env.h"
#include "common/identity.h"
#include "common/json_writer.h"
#include "common/log.h"
#include "preload/base/internal_thread.h"
#include "preload/capture/dumper.h"
#include "preload/link/agent_hello.h"
#include "preload/timing/call_sites.h"
#include "preload/timing/comm_table.h"
#include "preload/timing/poller.h"

namespace xtimer {
namespace {

constexpr size_t kMaxMessage = 200 * 1024;  // below the default SOCK_SEQPACKET limit
constexpr int kReconnectEveryS = 2;

// The string value of "key" in a flat JSON object (the agent's commands), whitespace allowed;
// "" if absent.
std::string StringField(const std::string& json, const char* key) {
  const std::string quoted = std::string("\"") + key + "\"";
  for (size_t at = json.find(quoted); at != std::string::npos; at = json.find(quoted, at + 1)) {
    size_t i = json.find_first_not_of(" \t\r\n", at + quoted.size());
    if (i == std::string::npos || json[i] != ':') continue;  // a value equal to the key's name
    i = json.find_first_not_of(" \t\r\n", i + 1);
    if (i == std::string::npos || json[i] != '"') return {};
    size_t end = json.find('"', i + 1);
    if (end == std::string::npos || end - i - 1 > 256) return {};
    return json.substr(i + 1, end - i - 1);
  }
  return {};
}

// The number value of "key" in a flat JSON object; NaN if absent or not a number.
double NumberField(const std::string& json, const char* key) {
  const std::string quoted = std::string("\"") + key + "\"";
  for (size_t at = json.find(quoted); at != std::string::npos; at = json.find(quoted, at + 1)) {
    size_t i = json.find_first_not_of(" \t\r\n", at + quoted.size());
    if (i == std::string::npos || json[i] != ':') continue;
    const char* start = json.c_str() + i + 1;
    char* end = nullptr;
    double v = std::strtod(start, &end);
    return end != start ? v : std::nan("");
  }
  return std::nan("");
}

}  // namespace

AgentLink::AgentLink(Settings settings, std::function<RankInfo()> rank_info)
    : settings_(settings), rank_info_(std::move(rank_info)) {}

bool AgentLink::Start(Poller& poller, StepSignals* steps, CommTable* comms) {
  poller_ = &poller;
  comms_ = comms;
  sampler_ = steps;
  path_ = env::String("XTIMER_AGENT_SOCKET");
  if (path_.empty()) return false;
  if (path_.size() >= sizeof(sockaddr_un::sun_path)) {
    Log(LogLevel::kWarn, "XTIMER_AGENT_SOCKET is longer than a Unix socket path may be; no node agent");
    return false;
  }
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  active_ = true;
  // Dumps taken before now were reported by the hello's socket, or asked for by nobody.
  dumps_seen_ = capture::Dumper::Instance().LastStats().dumps;
  thread_ = StartInternalThread("xtimer-agent", [this] { Loop(); });
  thread_.detach();
  return true;
}

void AgentLink::Wake() {
  uint64_t one = 1;
  if (wake_fd_ >= 0 && write(wake_fd_, &one, sizeof one) < 0) {
    // the counter is full: a wake-up is pending anyway
  }
}

void AgentLink::OfferSummary(std::string summary_json) {
  if (!active_) return;
  {
    MutexLock lock(mu_);
    summary_ = std::move(summary_json);
  }
  Wake();
}

void AgentLink::OfferSteps(const std::string& lines) {
  if (!active_) return;
  MutexLock lock(mu_);
  for (size_t at = 0; at < lines.size();) {
    size_t eol = lines.find('\n', at);
    if (eol == std::string::npos) eol = lines.size();
    if (eol > at) steps_.emplace_back(lines, at, eol - at);
    at = eol + 1;
  }
  while (steps_.size() > kMaxQueuedSteps) steps_.pop_front();
}

// One message of as many queued records as fit; the rest wait for the next second, and so do
// all of them when the agent is busy or gone.
void AgentLink::SendSteps() {
  std::deque<std::string> batch;
  {
    MutexLock lock(mu_);
    batch.swap(steps_);
  }
  // Like every message, with who we are (the agent reads rank and world size from any message).
  JsonWriter w;
  w.BeginObject().Field("type", "steps");
  WriteRankFields(w);
  std::string head = w.Take() + ",\"records\":[";
  while (!batch.empty() && head.size() + batch.front().size() + 2 > kMaxMessage) batch.pop_front();  // never fits
  if (batch.empty()) return;
  std::string msg = head;
  size_t taken = 0;
  for (const std::string& rec : batch) {
    if (msg.size() + rec.size() + 3 > kMaxMessage) break;
    if (taken++ > 0) msg += ',';
    msg += rec;
  }
  if (Send(msg + "]}")) batch.erase(batch.begin(), batch.begin() + static_cast<ptrdiff_t>(taken));
  MutexLock lock(mu_);
  for (auto it = batch.rbegin(); it != batch.rend(); ++it) steps_.push_front(std::move(*it));
  while (steps_.size() > kMaxQueuedSteps) steps_.pop_front();
}

void AgentLink::Flush(int ms) {
  if (!active_) return;
  {
    MutexLock lock(mu_);
    flush_steps_ = true;  // the last step records go now, not at the next second
  }
  Wake();
  MutexLock lock(mu_);
  sent_.WaitFor(mu_, std::chrono::milliseconds(ms),
                [this]() XT_REQUIRES(mu_) { return summary_.empty() && steps_.empty(); });
}

void AgentLink::SetHang(bool hung, const std::string& trigger) {
  if (!active_) return;
  // Called before the watchdog asks for its dump, so the count is the one before it.
  const bool dumps = hung && settings_.hang_action != HangAction::kLog;
  const uint64_t dumps_before = dumps ? capture::Dumper::Instance().LastStats().dumps : 0;
  MutexLock lock(mu_);
  if (dumps) {
    hang_at_ns_ = MonotonicNs();
    dumps_before_hang_ = dumps_before;
  }
  hung_ = hung;
  hang_trigger_ = trigger;
  state_changed_ = true;
  Wake();
}

bool AgentLink::Connect() {
  if (int early = TakeSocketFromLoad(path_); early >= 0) {  // the hello's socket (agent_hello.h)
    fd_ = early;
    return true;
  }
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return false;
  }
  fd_ = fd;
  Log(LogLevel::kDebug, "connected to the node agent at %s", path_.c_str());
  return true;
}

bool AgentLink::Send(const std::string& msg) {
  if (fd_ < 0) return false;
  if (msg.size() > kMaxMessage) {
    Log(LogLevel::kDebug, "agent message of %zu bytes dropped (limit %zu)", msg.size(), kMaxMessage);
    return false;
  }
  // Non-blocking: a slow agent costs us messages, never time.
  ssize_t n = send(fd_, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n == static_cast<ssize_t>(msg.size())) return true;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
  close(fd_);  // the agent went away
  fd_ = -1;
  return false;
}

void AgentLink::WriteRankFields(JsonWriter& w) {
  RankInfo r = rank_info_();
  w.Field("rank", r.rank).Field("world_size", r.world_size).Field("local_rank", r.local_rank);
  w.Field("host", HostName()).Field("pid", static_cast<int>(getpid()));
}

void AgentLink::SendStatus() {
  std::string trigger;
  bool hung;
  {
    MutexLock lock(mu_);
    hung = hung_;
    trigger = hang_trigger_;
  }
  // The oldest op in flight; the poller's lock is not waited for long.
  InflightOps ops;
  double oldest = 0;
  std::string oldest_name;
  if (poller_->Snapshot(&ops, 20)) {
    for (const InflightOp& op : ops)
      if (op.in_flight_s > oldest) {
        oldest = op.in_flight_s;
        oldest_name = op.name;
      }
  }
  JsonWriter w;
  w.BeginObject().Field("type", "status");
  WriteRankFields(w);
  w.Field("state", hung ? "hung" : "running").Field("trigger", trigger);
  w.Field("oldest_inflight_s", oldest).Field("oldest_inflight_op", oldest_name);
  w.Field("dumps", static_cast<unsigned long long>(capture::Dumper::Instance().LastStats().dumps));
  Send(w.EndObject().Take());
}

void AgentLink::ReceiveCommands() {
  char buf[4096];
  for (;;) {
    ssize_t n = recv(fd_, buf, sizeof buf - 1, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      close(fd_);
      fd_ = -1;
      return;
    }
    if (n < 0) return;
    std::string msg(buf, static_cast<size_t>(n));
    const std::string type = StringField(msg, "type");
    if (type == "dump") {
      AnswerDumpRequest(StringField(msg, "request_id"));
    } else if (type == "sample") {  // the agent suspects a host-side slowdown here
      if (sampler_ != nullptr) sampler_->RequestSamples(NumberField(msg, "seconds"), NumberField(msg, "hz"));
    }
  }
}

// The collector's dump round usually starts because of our own hang report, which can reach it
// before our hang dump is written. A second dump moments later would show the same stacks and
// overwrite the file that says why we dumped, so a request soon after our own hang is answered
// with that dump: the one being written carries the request id, or the finished one is sent again.
void AgentLink::AnswerDumpRequest(const std::string& request_id) {
  constexpr uint64_t kOwnDumpFreshNs = 10'000'000'000ull;
  uint64_t hang_at, dumps_before;
  {
    MutexLock lock(mu_);
    hang_at = hung_ ? hang_at_ns_ : 0;
    dumps_before = dumps_before_hang_;
  }
  pending_request_ = request_id;
  if (hang_at != 0 && MonotonicNs() - hang_at < kOwnDumpFreshNs) {
    if (capture::Dumper::Instance().LastStats().dumps > dumps_before) resend_last_dump_ = true;
    return;
  }
  capture::Dumper::Instance().RequestDump(capture::Reason::kRequest);
}

// A dump finished since we last looked (ours, the watchdog's or the dump signal's): tell the
// agent where the file is, so it can symbolise and forward it.
void AgentLink::ReportFinishedDumps() {
  capture::DumpStats st = capture::Dumper::Instance().LastStats();
  if (st.dumps == dumps_seen_ && !resend_last_dump_) return;
  dumps_seen_ = st.dumps;
  resend_last_dump_ = false;
  if (st.path.empty()) return;
  JsonWriter w;
  w.BeginObject().Field("type", "dump_written").Field("path", st.path).Field("request_id", pending_request_);
  WriteRankFields(w);
  if (Send(w.EndObject().Take())) pending_request_.clear();
}

// The collectives' fingerprints recorded since the last call (comm_table.h), in messages of at
// most kPrintsPerMessage calls: [comm, comm_size, seq, op, count, dtype, redop, root, site].
void AgentLink::SendPrints() {
  if (comms_ == nullptr) return;
  constexpr size_t kPrintsPerMessage = 2000;
  std::vector<CallPrintCopy> calls;
  comms_->TakePrints([&](const CallPrintCopy& c) { calls.push_back(c); }, &prints_lost_);
  for (size_t at = 0; at < calls.size(); at += kPrintsPerMessage) {
    JsonWriter w;
    w.BeginObject().Field("type", "prints");
    WriteRankFields(w);
    w.Field("lost", static_cast<unsigned long long>(prints_lost_));
    w.Key("calls").BeginArray();
    for (size_t i = at; i < calls.size() && i < at + kPrintsPerMessage; ++i) {
      const CallPrintCopy& c = calls[i];
      const Comm& comm = comms_->at(c.comm_slot);
      std::string_view op = c.api != nullptr ? c.api : "?";
      if (op.substr(0, 4) == "nccl") op.remove_prefix(4);
      w.BeginArray().String(comm.id).Int(comm.size).Uint(c.seq).String(op).Uint(c.count);
      const char* site = sites::Text(c.site);
      w.Int(c.dtype).Int(c.redop).Int(c.root).String(site != nullptr ? site : "").EndArray();
    }
    w.EndArray();
    Send(w.EndObject().Take());  // a full socket loses this batch: the agent compares what it has
  }
}

void AgentLink::Loop() {
  uint64_t next_connect = 0, next_status = 0, next_steps = 0;
  for (;;) {
    uint64_t now = MonotonicNs();
    if (fd_ < 0 && now >= next_connect) {
      next_connect = now + kReconnectEveryS * 1000000000ull;
      if (Connect()) {
        next_status = 0;
        // Before the agent: send the hello right away so it knows who we are.
        JsonWriter w;
        w.BeginObject().Field("type", "hello");
        WriteRankFields(w);
        w.Field("link", true);  // dump requests come as messages now, no longer as the dump signal
        Send(w.EndObject().Take());
      }
    }
    if (fd_ >= 0) {
      ReceiveCommands();
      bool changed;
      std::string summary;
      {
        MutexLock lock(mu_);
        changed = state_changed_;
        state_changed_ = false;
        summary.swap(summary_);
      }
      if (fd_ >= 0 && (now >= next_status || changed)) {
        SendStatus();
        next_status = now + 1000000000ull;
      }
      if (fd_ >= 0 && !summary.empty()) Send("{\"type\":\"summary\",\"summary\":" + summary + "}");
      bool flush_steps;
      {
        MutexLock lock(mu_);
        flush_steps = flush_steps_;
      }
      if (fd_ >= 0 && (now >= next_steps || flush_steps)) {
        SendSteps();
        next_steps = now + 1000000000ull;
      }
      if (fd_ >= 0) SendPrints();
      if (fd_ >= 0) ReportFinishedDumps();
    } else {
      MutexLock lock(mu_);
      summary_.clear();  // no agent: nobody to give it to
      if (flush_steps_) steps_.clear();
    }
    sent_.NotifyAll();
    // Sleep until the next tick, a command from the agent, or something to send.
    pollfd p[2] = {{wake_fd_, POLLIN, 0}, {fd_, POLLIN, 0}};
    if (poll(p, fd_ >= 0 ? 2 : 1, 100) > 0 && (p[0].revents & POLLIN)) {
      uint64_t n;
      if (read(wake_fd_, &n, sizeof n) < 0) {
        // nothing to read after all
      }
    }
  }
}

}  // namespace xtimer
