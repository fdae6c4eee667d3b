// The gRPC service over the collector core. Every handler is a callback-API reactor: unary calls
// finish in the handler, and the Commands stream of each agent is a ServerWriteReactor that
// holds no thread while it waits, so thousands of agents cost memory, not threads.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>
#include <vector>
#include <cstring>
#include <deque>
#include <unordered_map>

#include "collector.grpc.pb.h"
#include "collector/collector_server.h"
#include "common/clock.h"
#include "common/grpc_defaults.h"
#include "common/log.h"
#include "common/mutex.h"
#include "slowdown/slowdown_proto.h"

namespace xtimer::collector {

// ---- addresses ----

bool ParseListenAddress(const std::string& text, std::string* host, int* port, std::string* error) {
  std::string h, p;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return *error = "\"" + text + "\" is not HOST:PORT or [IPV6]:PORT", false;
    h = text.substr(1, close - 1);
    p = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string::npos || text.find(':') != colon)
      return *error = "\"" + text + "\" is not HOST:PORT or [IPV6]:PORT", false;
    h = text.substr(0, colon);
    p = text.substr(colon + 1);
  }
  if (h.empty())
    return *error = "\"" + text + "\" names no host (use 127.0.0.1, or 0.0.0.0 for every interface)", false;
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos || std::stoi(p) > 65535)
    return *error = "\"" + text + "\": the port must be a number from 0 to 65535", false;
  *host = h;
  *port = std::stoi(p);
  return true;
}

bool IsLoopback(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr a;
  return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

bool CheckCanListen(const std::string& host, int port, std::string* error) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) return *error = "cannot resolve \"" + host + "\": " + gai_strerror(rc), false;
  std::string why = "no address";
  bool ok = false;
  for (addrinfo* a = res; a && !ok; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = strerror(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 1) == 0) ok = true;
    else why = strerror(errno);
    close(fd);
  }
  freeaddrinfo(res);
  if (!ok) *error = "cannot listen on " + host + ":" + std::to_string(port) + ": " + why;
  return ok;
}

// ---- the service ----

using grpc::CallbackServerContext;
using grpc::Status;
using grpc::StatusCode;

namespace server_internal {

class CommandsReactor;

// How the core reaches one agent: its commands go to the open Commands stream, or wait here
// (a few) until the agent opens one. The core holds it through the SendCommand it was given.
// Lock order: a channel's mu, then its reactor's (Attach and Send push under the channel's lock).
struct AgentChannel {
  Mutex mu;
  CommandsReactor* reactor XT_GUARDED_BY(mu) = nullptr;  // the open stream, if any
  std::deque<v1::Command> waiting XT_GUARDED_BY(mu);     // commands sent before the stream opened
  bool closed XT_GUARDED_BY(mu) = false;                 // a stream was open and ended: the agent registers again
  void Send(const v1::Command& command) XT_EXCLUDES(mu);
};

}  // namespace server_internal
using server_internal::AgentChannel;
using server_internal::CommandsReactor;

struct CollectorServer::Impl final : public v1::Collector::CallbackService {
  CollectorCore* core = nullptr;
  ServerOptions options;
  std::string expected_auth;  // "Bearer <token>"
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  bool shut_down = false;

  Mutex mu;
  std::unordered_map<std::string, std::weak_ptr<AgentChannel>> channels XT_GUARDED_BY(mu);  // by session
  size_t registrations_since_sweep XT_GUARDED_BY(mu) = 0;
  std::unordered_map<std::string, double> auth_logged XT_GUARDED_BY(mu);  // peer address -> when
  std::atomic<uint64_t> unauthenticated{0}, unknown_session_calls{0}, uploads_busy{0};
  std::atomic<size_t> streams_open{0};

  // Uploads are validated and merged by a few worker threads, not by gRPC's own: a storm of
  // stack files then cannot hold up Report calls (the hang events) behind them. The queue is
  // bounded in bytes; beyond it an upload is answered RESOURCE_EXHAUSTED and the agent retries.
  struct UploadJob {
    grpc::ServerUnaryReactor* reactor;
    const v1::StackUpload* request;
    v1::UploadReply* reply;
  };
  static constexpr size_t kMaxQueuedUploadBytes = size_t{512} << 20;
  static constexpr int kUploadNice = 10;
  Mutex upload_mu;
  CondVar upload_cv;
  std::deque<UploadJob> upload_queue XT_GUARDED_BY(upload_mu);
  size_t upload_queue_bytes XT_GUARDED_BY(upload_mu) = 0;
  bool upload_stop XT_GUARDED_BY(upload_mu) = false;
  std::vector<std::thread> upload_workers;

  void StartUploadWorkers() {
    unsigned n = std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
    for (unsigned i = 0; i < n; ++i) upload_workers.emplace_back([this] { UploadWorker(); });
  }

  void StopUploadWorkers() XT_EXCLUDES(upload_mu) {
    {
      MutexLock lock(upload_mu);
      upload_stop = true;
    }
    upload_cv.NotifyAll();
    for (auto& t : upload_workers) t.join();
    upload_workers.clear();
  }

  void UploadWorker() XT_EXCLUDES(upload_mu) {
    // Below the gRPC threads: under a storm of stacks the CPU goes to Report calls first.
    setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), kUploadNice);
    MutexLock lock(upload_mu);
    for (;;) {
      upload_cv.Wait(upload_mu, [&]() XT_REQUIRES(upload_mu) { return upload_stop || !upload_queue.empty(); });
      if (upload_queue.empty()) return;  // stopping, and every queued call is answered
      UploadJob job = upload_queue.front();
      upload_queue.pop_front();
      lock.Unlock();
      *job.reply = core->Upload(*job.request);
      size_t bytes = job.request->stack_json().size();
      job.reactor->Finish(Status::OK);  // the request is not touched after this
      lock.Lock();
      upload_queue_bytes -= bytes;
    }
  }

  // ---- authentication ----

  static bool SameSecret(std::string_view a, std::string_view b) {
    unsigned char diff = a.size() != b.size();
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
    return diff == 0;
  }

  // Empty token: everyone. Else the call must carry "authorization: Bearer <token>".
  bool Authorized(CallbackServerContext* ctx, const char* method) XT_EXCLUDES(mu) {
    if (expected_auth.empty()) return true;
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    if (it != md.end() && SameSecret(std::string_view(it->second.data(), it->second.size()), expected_auth))
      return true;
    ++unauthenticated;
    // One line per peer address a minute (a port per connection would defeat that: drop it).
    std::string peer = ctx->peer();
    if (size_t colon = peer.rfind(':'); colon != std::string::npos && colon > 5) peer.resize(colon);
    bool log = false;
    {
      MutexLock lock(mu);
      double now = MonotonicS();
      if (auth_logged.size() > 10000) auth_logged.clear();
      auto [entry, fresh] = auth_logged.try_emplace(peer, now);
      if (fresh || now - entry->second >= 60) entry->second = now, log = true;
    }
    if (log)
      Log(LogLevel::kWarn, "collector: refused %s from %s: %s token (UNAUTHENTICATED; logged once a minute per peer)",
          method, peer.c_str(), it == md.end() ? "no" : "wrong");
    return false;
  }

  static Status Unauthenticated() {
    return Status(StatusCode::UNAUTHENTICATED, "missing or wrong token (metadata \"authorization: Bearer <token>\")");
  }
  Status UnknownSession() {
    ++unknown_session_calls;
    return Status(StatusCode::FAILED_PRECONDITION, "unknown session (the collector restarted?): register again");
  }

  // ---- unary calls ----

  grpc::ServerUnaryReactor* Register(CallbackServerContext* ctx, const v1::RegisterRequest* req,
                                     v1::RegisterReply* reply) override {
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    if (!Authorized(ctx, "Register")) {
      r->Finish(Unauthenticated());
      return r;
    }
    auto channel = std::make_shared<AgentChannel>();
    std::string error;
    std::string session = core->Register(
        *req, [channel](const v1::Command& c) { channel->Send(c); }, &error);
    if (session.empty()) {
      r->Finish(Status(StatusCode::FAILED_PRECONDITION, error));
      return r;
    }
    {
      MutexLock lock(mu);
      channels[session] = channel;
      // Sessions the core forgot (or replaced) leave an expired entry here: sweep now and then.
      if (++registrations_since_sweep >= 1024) {
        registrations_since_sweep = 0;
        std::erase_if(channels, [](const auto& kv) { return kv.second.expired(); });
      }
    }
    reply->set_session(session);
    reply->set_max_message_bytes(static_cast<uint32_t>(options.max_message_bytes));
    r->Finish(Status::OK);
    return r;
  }

  grpc::ServerUnaryReactor* Report(CallbackServerContext* ctx, const v1::ReportRequest* req,
                                   v1::ReportReply* reply) override {
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    if (!Authorized(ctx, "Report")) {
      r->Finish(Unauthenticated());
      return r;
    }
    v1::Command command;  // a DUMP for this agent, if a round has not asked it yet
    reply->set_known(core->Report(*req, &command));
    if (command.kind() != v1::Command::KIND_UNSPECIFIED) *reply->mutable_command() = std::move(command);
    r->Finish(Status::OK);
    return r;
  }

  // Step records go to the judge at once (a few microseconds each); the reply has the verdict.
  grpc::ServerUnaryReactor* Steps(CallbackServerContext* ctx, const v1::StepsRequest* req,
                                  v1::StepsReply* reply) override {
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    if (!Authorized(ctx, "Steps")) {
      r->Finish(Unauthenticated());
      return r;
    }
    // The wire's records and verdict are converted here, at the edge; the core takes structs.
    std::vector<slowdown::StepRecord> records;
    records.reserve(req->records_size());
    for (const v1::StepRecord& p : req->records()) records.push_back(slowdown::StepRecordFromProto(p));
    slowdown::Verdict verdict;
    reply->set_known(core->Steps(req->session(), std::move(records), &verdict));
    if (verdict.updated > 0) *reply->mutable_slowdown() = slowdown::VerdictToProto(verdict);
    r->Finish(Status::OK);
    return r;
  }

  grpc::ServerUnaryReactor* UploadStacks(CallbackServerContext* ctx, const v1::StackUpload* req,
                                         v1::UploadReply* reply) override {
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    if (!Authorized(ctx, "UploadStacks")) {
      r->Finish(Unauthenticated());
      return r;
    }
    // An unknown session is an error status, not a refusal: the agent keeps the stacks,
    // registers again and resends them (a refusal would make it drop them).
    if (!core->HasSession(req->session())) {
      r->Finish(UnknownSession());
      return r;
    }
    {
      MutexLock lock(upload_mu);
      if (upload_queue_bytes + req->stack_json().size() > kMaxQueuedUploadBytes && !upload_queue.empty()) {
        ++uploads_busy;
        r->Finish(Status(
            StatusCode::RESOURCE_EXHAUSTED,
            "the collector has " + std::to_string(upload_queue_bytes >> 20) + " MiB of stacks to read; retry shortly"));
        return r;
      }
      upload_queue_bytes += req->stack_json().size();
      upload_queue.push_back(UploadJob{r, req, reply});
    }
    upload_cv.NotifyOne();
    return r;
  }

  grpc::ServerWriteReactor<v1::Command>* Commands(CallbackServerContext* ctx, const v1::CommandsRequest* req) override;

  void Detached(const std::string& session) { core->Disconnect(session); }
};

namespace server_internal {

// One agent's open Commands stream.
class CommandsReactor final : public grpc::ServerWriteReactor<v1::Command> {
 public:
  CommandsReactor(CollectorServer::Impl* service, std::string session)
      : service_(service), session_(std::move(session)) {
    ++service_->streams_open;
  }

  // Ends the stream at once (refused before it started).
  void Refuse(Status st) XT_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (!FinishNowLocked(&st)) return;
    lock.Unlock();
    Finish(std::move(st));
  }

  // false: the session's stream already ended once (the agent must register again).
  bool Attach(std::shared_ptr<AgentChannel> channel) XT_EXCLUDES(mu_) {
    CommandsReactor* old = nullptr;
    std::deque<v1::Command> waiting;
    {
      MutexLock lock(channel->mu);
      if (channel->closed) return false;
      old = channel->reactor;
      channel->reactor = this;
      waiting.swap(channel->waiting);
      channel_ = channel;
      // Push under the channel's lock: `old` cannot go away meanwhile (OnDone detaches under it).
      if (old) old->Refuse(Status(StatusCode::ABORTED, "replaced by a newer command stream of the same session"));
      for (const v1::Command& c : waiting) Push(c);
    }
    return true;
  }

  // A command for the agent (called under the channel's lock).
  void Push(const v1::Command& command) XT_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (finished_) return;
    if (queue_.size() < 64) queue_.push_back(command);
    if (!TakeNextLocked()) return;
    lock.Unlock();
    StartWrite(&current_);
  }

  void OnWriteDone(bool ok) XT_EXCLUDES(mu_) override {
    MutexLock lock(mu_);
    writing_ = false;
    if (!ok || finish_wanted_) {
      Status st = ok ? std::move(finish_status_) : Status(StatusCode::UNAVAILABLE, "write failed");
      if (!FinishNowLocked(&st)) return;
      lock.Unlock();
      Finish(std::move(st));
      return;
    }
    if (!TakeNextLocked()) return;
    lock.Unlock();
    StartWrite(&current_);
  }

  void OnCancel() override { Refuse(Status::CANCELLED); }

  void OnDone() override {
    bool was_current = false;
    if (auto channel = channel_) {
      MutexLock lock(channel->mu);
      if (channel->reactor == this) {
        channel->reactor = nullptr;
        channel->closed = true;
        was_current = true;
      }
    }
    // The agent's stream is gone: no more DUMPs for this session (it registers again).
    if (was_current) service_->Detached(session_);
    --service_->streams_open;
    delete this;
  }

 private:
  // Moves the next command into current_ when one may be written now; the caller then starts the
  // write after releasing mu_. current_ belongs to the one write in flight (writing_).
  bool TakeNextLocked() XT_REQUIRES(mu_) {
    if (writing_ || finished_ || finish_wanted_ || queue_.empty()) return false;
    current_ = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    return true;
  }

  // Whether to Finish(*st) now, after releasing mu_: once, and with a write in flight only after
  // it completes (*st is kept for then).
  bool FinishNowLocked(Status* st) XT_REQUIRES(mu_) {
    if (finished_) return false;
    if (writing_) {
      if (!finish_wanted_) finish_wanted_ = true, finish_status_ = std::move(*st);
      return false;
    }
    finished_ = true;
    return true;
  }

  CollectorServer::Impl* service_;
  std::string session_;
  std::shared_ptr<AgentChannel> channel_;
  Mutex mu_;
  std::deque<v1::Command> queue_ XT_GUARDED_BY(mu_);
  v1::Command current_;  // written under mu_ while no write is in flight, then read by the write
  bool writing_ XT_GUARDED_BY(mu_) = false, finished_ XT_GUARDED_BY(mu_) = false,
                finish_wanted_ XT_GUARDED_BY(mu_) = false;
  Status finish_status_ XT_GUARDED_BY(mu_);
};

void AgentChannel::Send(const v1::Command& command) {
  MutexLock lock(mu);
  if (reactor) {
    reactor->Push(command);
  } else if (waiting.size() < 16) {
    waiting.push_back(command);
  }
}

}  // namespace server_internal

grpc::ServerWriteReactor<v1::Command>* CollectorServer::Impl::Commands(CallbackServerContext* ctx,
                                                                       const v1::CommandsRequest* req) {
  auto* r = new CommandsReactor(this, req->session());
  if (!Authorized(ctx, "Commands")) {
    r->Refuse(Unauthenticated());
    return r;
  }
  std::shared_ptr<AgentChannel> channel;
  {
    MutexLock lock(mu);
    auto it = channels.find(req->session());
    if (it != channels.end()) channel = it->second.lock();
  }
  if (!channel || !core->HasSession(req->session())) {
    r->Refuse(UnknownSession());
    return r;
  }
  if (!r->Attach(std::move(channel))) r->Refuse(UnknownSession());
  return r;
}

// ---- the server ----

CollectorServer::CollectorServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CollectorServer::~CollectorServer() { Shutdown(0); }

std::unique_ptr<CollectorServer> CollectorServer::Start(CollectorCore* core, const ServerOptions& options,
                                                        std::string* error) {
  UseGrpcDefaults();
  std::string host;
  int port = 0;
  if (!ParseListenAddress(options.listen, &host, &port, error)) return nullptr;
  if (!CheckCanListen(host, port, error)) return nullptr;
  auto impl = std::make_unique<Impl>();
  impl->core = core;
  impl->options = options;
  if (!options.token.empty()) impl->expected_auth = "Bearer " + options.token;

  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!options.tls_cert_pem.empty() || !options.tls_key_pem.empty()) {
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({options.tls_key_pem, options.tls_cert_pem});
    creds = grpc::SslServerCredentials(ssl);
  } else {
    creds = grpc::InsecureServerCredentials();
  }
  grpc::ServerBuilder builder;
  std::string address = host.find(':') != std::string::npos ? "[" + host + "]:" + std::to_string(port)
                                                            : host + ":" + std::to_string(port);
  builder.AddListeningPort(address, creds, &impl->port);
  builder.RegisterService(impl.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(1 << 20);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);        // a second collector on the port must fail
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);  // find agents that vanished
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  impl->server = builder.BuildAndStart();
  if (!impl->server || impl->port == 0) {
    *error = "cannot start the gRPC server on " + address +
             (creds && !options.tls_cert_pem.empty() ? " (is the TLS certificate/key a valid PEM pair?)" : "");
    return nullptr;
  }
  impl->StartUploadWorkers();
  return std::unique_ptr<CollectorServer>(new CollectorServer(std::move(impl)));
}

int CollectorServer::port() const { return impl_->port; }

void CollectorServer::Shutdown(double grace_s) {
  if (!impl_ || impl_->shut_down) return;
  impl_->shut_down = true;
  impl_->server->Shutdown(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, grace_s) * 1000)));
  impl_->server->Wait();  // the upload workers answer what is queued meanwhile
  impl_->StopUploadWorkers();
}

void CollectorServer::AppendMetrics(PrometheusText* out) const {
  out->Family("xtimer_collector_unauthenticated_calls_total", "counter",
              "gRPC calls refused for a missing or wrong token");
  out->Add("xtimer_collector_unauthenticated_calls_total", {}, static_cast<double>(impl_->unauthenticated.load()));
  out->Family("xtimer_collector_unknown_session_calls_total", "counter",
              "Upload and Commands calls with a session the collector does not know (agents register again)");
  out->Add("xtimer_collector_unknown_session_calls_total", {},
           static_cast<double>(impl_->unknown_session_calls.load()));
  out->Family("xtimer_collector_uploads_busy_total", "counter",
              "Uploads answered RESOURCE_EXHAUSTED because too many stack bytes were waiting to be read");
  out->Add("xtimer_collector_uploads_busy_total", {}, static_cast<double>(impl_->uploads_busy.load()));
  out->Family("xtimer_collector_command_streams_open", "gauge", "Open Commands streams (one per connected agent)");
  out->Add("xtimer_collector_command_streams_open", {}, static_cast<double>(impl_->streams_open.load()));
}

uint64_t CollectorServer::unauthenticated_calls() const { return impl_->unauthenticated; }
size_t CollectorServer::command_streams_open() const { return impl_->streams_open; }

}  // namespace xtimer::collector
