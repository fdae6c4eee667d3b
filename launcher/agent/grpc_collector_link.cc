// CollectorLink over gRPC (common/proto/collector.proto). The one place on the agent's side where
// step records become wire messages and the collector's verdicts structs again
// (slowdown/slowdown_proto.h).
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "collector.grpc.pb.h"
#include "common/grpc_defaults.h"
#include "common/identity.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/regular_file.h"
#include "slowdown/slowdown_proto.h"
#include "launcher/agent/collector_link.h"

namespace xtimer {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kReportPeriod = std::chrono::seconds(10);
constexpr auto kCallDeadline = std::chrono::seconds(5);
constexpr auto kUploadDeadline = std::chrono::seconds(30);
// At exit, how long a link that has not reached its collector yet waits for it (Stop()).
constexpr auto kFirstContactWait = std::chrono::milliseconds(1000);
constexpr size_t kMaxQueuedUploads = 256;
// Step records go about once a second; a collector out of reach for long loses the oldest
// beyond this many (a few minutes of a node's records).
constexpr auto kStepsPeriod = std::chrono::seconds(1);
constexpr size_t kMaxQueuedSteps = 20000;
// Collective fingerprints go with a report about every 0.2 s (the collector compares the nodes'
// ranks); a collector out of reach loses the oldest beyond this many.
constexpr auto kPrintsPeriod = std::chrono::milliseconds(200);
constexpr size_t kMaxQueuedPrints = 100000;
// Evictions of this node (one a run, in practice) wait for the next report.
constexpr size_t kMaxQueuedEvictions = 16;
// A rank's own dump waits this long before it goes: if the collector asks for a dump round
// meanwhile (or did shortly before), the rank answers the round with this same dump, and the
// own copy is not sent (in a storm every rank would otherwise send its stacks twice, unpaced).
constexpr auto kOwnDumpHold = std::chrono::seconds(2);
constexpr auto kRoundCoversOwnDump = std::chrono::seconds(10);
// Stacks held for a round whose UPLOAD never came (the round finished first) are dropped.
constexpr auto kHeldUploadMax = std::chrono::seconds(120);

std::string RandomId() {
  std::random_device rd;
  std::ostringstream s;
  s << std::hex << rd() << rd();
  return s.str();
}

struct QueuedUpload {
  v1::StackUpload upload;
  Clock::time_point queued;
};

class GrpcCollectorLink : public CollectorLink {
 public:
  GrpcCollectorLink(std::string address, std::string token, std::shared_ptr<grpc::ChannelCredentials> creds)
      : address_(std::move(address)), token_(std::move(token)), agent_id_(RandomId()) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(16 << 20);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 500);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);  // our own backoff (Loop) paces the retries
    stub_ = v1::Collector::NewStub(grpc::CreateCustomChannel(address_, creds, args));
  }

  ~GrpcCollectorLink() override { Stop(0); }

  void Start(OnDump on_dump) override {
    on_dump_ = std::move(on_dump);
    worker_ = std::thread([this] { Loop(); });
  }

  void Report(std::vector<v1::RankReport> reports, bool urgent) override {
    MutexLock lock(mu_);
    reports_ = std::move(reports);
    have_reports_ = true;
    urgent_ |= urgent;
    cv_.NotifyAll();
  }

  void Prints(int32_t rank, std::vector<desync::Fingerprint> calls) override {
    MutexLock lock(mu_);
    for (desync::Fingerprint& f : calls) {
      v1::CallPrint& p = prints_.emplace_back();
      p.set_rank(rank);
      p.set_comm(std::move(f.comm));
      p.set_comm_size(f.comm_size);
      p.set_seq(f.seq);
      p.set_op(std::move(f.op));
      p.set_count(f.count);
      p.set_dtype(f.dtype);
      p.set_redop(f.redop);
      p.set_root(f.root);
      p.set_site(std::move(f.site));
    }
    while (prints_.size() > kMaxQueuedPrints) prints_.pop_front();
    cv_.NotifyAll();  // the loop may be waiting for the next report
  }

  void Eviction(v1::NodeEviction eviction) override {
    MutexLock lock(mu_);
    evictions_.push_back(std::move(eviction));
    while (evictions_.size() > kMaxQueuedEvictions) evictions_.pop_front();
    have_reports_ = true;  // it goes with a report, now
    urgent_ = true;
    cv_.NotifyAll();
  }

  void Upload(int rank, const std::string& dump_id, std::string stack_json) override {
    MutexLock lock(mu_);
    if (uploads_.size() >= kMaxQueuedUploads) {
      Log(LogLevel::kWarn, "agent: %zu stack uploads waiting for the collector; dropping the oldest", uploads_.size());
      uploads_.pop_front();
    }
    QueuedUpload q;
    q.upload.set_rank(rank);
    q.upload.set_dump_id(dump_id);
    q.upload.set_stack_json(std::move(stack_json));
    q.queued = Clock::now();
    uploads_.push_back(std::move(q));
    cv_.NotifyAll();
  }

  void Steps(std::vector<slowdown::StepRecord> records) override {
    std::vector<v1::StepRecord> wire;
    wire.reserve(records.size());
    for (const slowdown::StepRecord& r : records) wire.push_back(slowdown::StepRecordToProto(r));
    MutexLock lock(mu_);
    if (!steps_wanted_) return;
    for (auto& r : wire) steps_.push_back(std::move(r));
    if (steps_.size() > kMaxQueuedSteps) {
      if (!steps_dropping_)
        Log(LogLevel::kWarn,
            "agent: %zu step records waiting for the collector at %s; dropping the oldest (the slowdown judge loses "
            "them)",
            steps_.size(), address_.c_str());
      steps_dropping_ = true;
      while (steps_.size() > kMaxQueuedSteps) steps_.pop_front();
    }
    cv_.NotifyAll();
  }

  void Stop(int ms) override {
    {
      MutexLock lock(mu_);
      if (stopping_) return;
      // Let the worker send what is queued, up to `ms`; nothing is held back any more. A
      // collector that refused us or cannot be reached gets no wait at all (its last call
      // failed), one we have not reached yet (a first registration under way) at most
      // kFirstContactWait: a job's exit is not held for a collector that is not there.
      draining_ = true;
      if (last_state_only_) have_reports_ = true;  // the last words carry the op statistics
      cv_.NotifyAll();
      auto budget = std::chrono::milliseconds(ms);
      if (!registered_) budget = std::min(budget, kFirstContactWait);
      cv_.WaitFor(mu_, budget, [this]() XT_REQUIRES(mu_) { return (uploads_.empty() && !have_reports_) || failing_; });
      if (failing_ && (!uploads_.empty() || have_reports_))
        Log(LogLevel::kWarn,
            "agent: the collector at %s cannot be reached; %zu stack upload(s) and the last report not sent",
            address_.c_str(), uploads_.size());
      stopping_ = true;
      if (call_ctx_ != nullptr) call_ctx_->TryCancel();  // a call under way ends now
      cv_.NotifyAll();
    }
    CancelCommands();
    if (worker_.joinable()) worker_.join();
    if (reader_.joinable()) reader_.join();
  }

  bool connected() const override { return registered_.load(); }

 private:
  void AddToken(grpc::ClientContext* ctx) {
    if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
  }

  bool Register() {
    v1::RegisterRequest req;
    req.set_protocol_version(1);
    req.set_node(HostName());
    req.set_agent_id(agent_id_);
    {
      MutexLock lock(mu_);
      for (const auto& r : reports_) *req.add_ranks() = r.rank();
    }
    grpc::ClientContext ctx;
    AddToken(&ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
    v1::RegisterReply reply;
    grpc::Status st;
    {
      CallScope scope(this, &ctx);
      st = stub_->Register(&ctx, req, &reply);
    }
    if (!st.ok()) {
      LogFailure("register with", st);
      return false;
    }
    {
      MutexLock lock(mu_);
      session_ = reply.session();
      if (reply.max_message_bytes() > 0) max_message_bytes_ = reply.max_message_bytes();
      have_reports_ = have_reports_ || !reports_.empty();  // a new collector needs our state now
      urgent_ = true;
      ops_sent_.clear();
      steps_wanted_ = true;  // this collector may judge slowdowns (an older one says so once)
    }
    Log(LogLevel::kInfo, "agent: connected to the collector at %s", address_.c_str());
    failures_logged_ = 0;
    failing_ = false;
    registered_ = true;
    StartCommands();
    return true;
  }

  // The call being made (under mu_), so that Stop() can cancel it: a call to a collector that
  // does not answer would otherwise hold the agent's exit for its whole deadline.
  class CallScope {
   public:
    CallScope(GrpcCollectorLink* link, grpc::ClientContext* ctx) : link_(link) {
      MutexLock lock(link_->mu_);
      link_->call_ctx_ = ctx;
      if (link_->stopping_) ctx->TryCancel();
    }
    ~CallScope() {
      MutexLock lock(link_->mu_);
      link_->call_ctx_ = nullptr;
    }

   private:
    GrpcCollectorLink* link_;
  };

  // One line per kind of trouble, not one per retry.
  void LogFailure(const char* what, const grpc::Status& st) {
    failing_ = true;
    cv_.NotifyAll();  // Stop() may be waiting for this collector
    if (stopping_) return;
    if (failures_logged_++ == 0 || st.error_code() == grpc::StatusCode::UNAUTHENTICATED)
      Log(LogLevel::kWarn, "agent: cannot %s the collector at %s: %s (the job goes on; retrying)", what,
          address_.c_str(), st.error_message().c_str());
  }

  void StartCommands() {
    CancelCommands();
    if (reader_.joinable()) reader_.join();
    MutexLock lock(mu_);
    commands_ctx_ = std::make_unique<grpc::ClientContext>();
    AddToken(commands_ctx_.get());
    v1::CommandsRequest req;
    req.set_session(session_);
    grpc::ClientContext* ctx = commands_ctx_.get();
    reader_ = std::thread([this, ctx, req] {
      auto stream = stub_->Commands(ctx, req);
      v1::Command cmd;
      while (stream->Read(&cmd)) OnCommand(cmd);
      grpc::Status st = stream->Finish();
      if (!stopping_) {
        LogFailure("keep the command stream with", st);
        registered_ = false;  // the collector went away: register again
        cv_.NotifyAll();
      }
    });
  }

  void OnCommand(const v1::Command& cmd) {
    if (cmd.kind() == v1::Command::DUMP) {
      {
        MutexLock lock(mu_);
        const Clock::time_point now = Clock::now();
        last_dump_command_ = now;
        // Rounds long over (their held stacks were dropped at kHeldUploadMax) are forgotten.
        std::erase_if(held_, [&](const auto& h) { return now - h.second > 2 * kHeldUploadMax; });
        if (cmd.wait_for_upload()) held_.emplace(cmd.dump_id(), now);
      }
      if (on_dump_) on_dump_(cmd.dump_id());
    } else if (cmd.kind() == v1::Command::UPLOAD) {
      MutexLock lock(mu_);
      held_.erase(cmd.dump_id());
      cv_.NotifyAll();
    } else if (cmd.kind() == v1::Command::SAMPLE) {
      if (on_sample_) on_sample_(cmd.rank(), cmd.seconds(), cmd.hz());
    } else if (cmd.kind() == v1::Command::OUT_OF_STEP) {
      if (on_out_of_step_) on_out_of_step_(cmd.rank(), cmd.comm(), cmd.reason());
    }
  }

  // The queued step records (as many as fit in half a message); the reply's verdict goes to the
  // agent. Kept for a retry when the call fails; dropped for good by a collector without Steps.
  void SendSteps() {
    v1::StepsRequest req;
    {
      MutexLock lock(mu_);
      req.set_session(session_);
      size_t bytes = 0;
      while (!steps_.empty() && bytes < max_message_bytes_ / 2) {
        bytes += steps_.front().ByteSizeLong();
        *req.add_records() = std::move(steps_.front());
        steps_.pop_front();
      }
      steps_dropping_ = false;
    }
    grpc::ClientContext ctx;
    AddToken(&ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
    v1::StepsReply reply;
    grpc::Status st;
    {
      CallScope scope(this, &ctx);
      st = stub_->Steps(&ctx, req, &reply);
    }
    auto keep = [&] {
      MutexLock lock(mu_);
      for (int i = req.records_size(); i-- > 0;) steps_.push_front(std::move(*req.mutable_records(i)));
      while (steps_.size() > kMaxQueuedSteps) steps_.pop_back();
    };
    if (st.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      Log(LogLevel::kInfo,
          "agent: the collector at %s does not judge slowdowns (an older version); no step records sent",
          address_.c_str());
      MutexLock lock(mu_);
      steps_wanted_ = false;
      steps_.clear();
      return;
    }
    if (!st.ok()) {
      LogFailure("send step records to", st);
      registered_ = false;
      keep();
      return;
    }
    if (!reply.known()) {
      Log(LogLevel::kInfo, "agent: the collector does not know us (restarted?); registering again");
      registered_ = false;
      keep();
      return;
    }
    if (reply.has_slowdown() && on_verdict_) on_verdict_(slowdown::VerdictFromProto(reply.slowdown()));
  }

  // The first upload that may go now (uploads_.end() if none); drops own dumps a round covers
  // and stacks held too long; *wake: when a held own dump may go.
  std::deque<QueuedUpload>::iterator NextUpload(Clock::time_point now, Clock::time_point* wake) XT_REQUIRES(mu_) {
    for (auto it = uploads_.begin(); it != uploads_.end();) {
      const std::string& id = it->upload.dump_id();
      if (id.empty()) {
        if (last_dump_command_ && *last_dump_command_ + kRoundCoversOwnDump >= it->queued) {
          it = uploads_.erase(it);  // the round has (or will get) this rank's stacks
          continue;
        }
        if (draining_ || now >= it->queued + kOwnDumpHold) return it;
        *wake = std::min(*wake, it->queued + kOwnDumpHold);
      } else {
        auto h = held_.find(id);
        if (h == held_.end() || draining_) return it;
        if (now >= h->second + kHeldUploadMax) {
          Log(LogLevel::kWarn, "agent: the collector never asked for rank %d's stacks of dump round %s; dropped",
              it->upload.rank(), id.c_str());
          it = uploads_.erase(it);
          continue;
        }
        *wake = std::min(*wake, h->second + kHeldUploadMax);
      }
      ++it;
    }
    return uploads_.end();
  }

  void CancelCommands() {
    MutexLock lock(mu_);
    if (commands_ctx_) commands_ctx_->TryCancel();
  }

  // A report sent for urgency (a hang found) between periodic ones carries the state of the
  // ranks whose op statistics the collector already has (it keeps them from the last full
  // report). When every rank of a job hangs at once, the collector then takes a burst of small
  // messages, not of big ones.
  // `with_reports` false: only the queued fingerprints go (the ranks' reports are not due).
  void SendReports(bool periodic, bool with_reports = true) {
    v1::ReportRequest req;
    bool state_only;
    std::vector<int32_t> with_ops;
    {
      MutexLock lock(mu_);
      state_only = !periodic && !draining_;
      req.set_session(session_);
      size_t bytes = 0;
      while (!prints_.empty() && bytes < max_message_bytes_ / 4) {
        bytes += prints_.front().ByteSizeLong();
        *req.add_prints() = std::move(prints_.front());
        prints_.pop_front();
      }
      while (!evictions_.empty()) {
        *req.add_evictions() = std::move(evictions_.front());
        evictions_.pop_front();
      }
      if (with_reports) {
        for (const auto& r : reports_) {
          v1::RankReport* out = req.add_reports();
          *out = r;
          if (state_only && ops_sent_.contains(r.rank().rank())) out->clear_ops();
          if (out->ops_size() > 0) with_ops.push_back(r.rank().rank());
        }
        have_reports_ = false;
        urgent_ = false;
      }
    }
    grpc::ClientContext ctx;
    AddToken(&ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
    v1::ReportReply reply;
    grpc::Status st;
    {
      CallScope scope(this, &ctx);
      st = stub_->Report(&ctx, req, &reply);
    }
    if (st.ok() && reply.known()) {
      {
        MutexLock lock(mu_);
        ops_sent_.insert(with_ops.begin(), with_ops.end());
        if (with_reports) last_state_only_ = state_only;
      }
      if (reply.has_command()) OnCommand(reply.command());  // a DUMP that came with the reply
    }
    if (!st.ok() || !reply.known()) {
      if (!st.ok()) LogFailure("report to", st);
      if (st.ok()) Log(LogLevel::kInfo, "agent: the collector does not know us (restarted?); registering again");
      registered_ = false;
      MutexLock lock(mu_);
      have_reports_ |= with_reports;  // resend after registering
      for (int i = req.prints_size(); i-- > 0;) prints_.push_front(std::move(*req.mutable_prints(i)));
      while (prints_.size() > kMaxQueuedPrints) prints_.pop_back();
      for (int i = req.evictions_size(); i-- > 0;) evictions_.push_front(std::move(*req.mutable_evictions(i)));
      have_reports_ |= !evictions_.empty();  // an eviction waits for the next report
    }
  }

  // The upload taken from the queue is put back at the front when it must be retried.
  void SendOneUpload() {
    v1::StackUpload u;
    Clock::time_point queued;
    {
      MutexLock lock(mu_);
      Clock::time_point wake = Clock::time_point::max();
      auto it = NextUpload(Clock::now(), &wake);
      if (it == uploads_.end()) return;
      u = std::move(it->upload);
      queued = it->queued;
      uploads_.erase(it);
      u.set_session(session_);
      if (u.ByteSizeLong() + 1024 > max_message_bytes_) {
        Log(LogLevel::kWarn, "agent: rank %d's stack file (%zu bytes) is over the collector's limit of %u; not sent",
            u.rank(), u.stack_json().size(), max_message_bytes_);
        return;
      }
    }
    auto keep = [&] {
      MutexLock lock(mu_);
      uploads_.push_front(QueuedUpload{std::move(u), queued});
    };
    grpc::ClientContext ctx;
    AddToken(&ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + kUploadDeadline);
    v1::UploadReply reply;
    grpc::Status st;
    {
      CallScope scope(this, &ctx);
      st = stub_->UploadStacks(&ctx, u, &reply);
    }
    if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      // The collector is busy (a storm of uploads): keep it, retry shortly, same session.
      keep();
      MutexLock lock(mu_);
      cv_.WaitFor(mu_, std::chrono::seconds(1), [this] { return stopping_.load(); });
      return;
    }
    if (!st.ok()) {
      LogFailure("upload stacks to", st);
      registered_ = false;
      keep();  // retried after registering again
      return;
    }
    if (!reply.accepted())
      Log(LogLevel::kWarn, "agent: the collector refused rank %d's stacks: %s", u.rank(), reply.reason().c_str());
  }

  void Loop() {
    auto backoff = std::chrono::milliseconds(500);
    auto next_report = Clock::now();
    auto next_steps = Clock::now();
    auto next_prints = Clock::now();
    while (!stopping_) {
      if (!registered_) {
        if (!Register()) {
          MutexLock lock(mu_);
          cv_.WaitFor(mu_, backoff, [this] { return stopping_.load(); });
          backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
          continue;
        }
        backoff = std::chrono::milliseconds(500);
      }
      bool send_reports, send_upload, send_steps, send_prints;
      {
        MutexLock lock(mu_);
        // Until the next report, a held upload or the step records are due; any change (notify)
        // looks again.
        Clock::time_point wake = next_report;
        if (!steps_.empty()) wake = std::min(wake, next_steps);
        if (!prints_.empty()) wake = std::min(wake, next_prints);
        bool upload_ready = NextUpload(Clock::now(), &wake) != uploads_.end();
        bool steps_ready = !steps_.empty() && Clock::now() >= next_steps;
        bool prints_ready = !prints_.empty() && Clock::now() >= next_prints;
        if (!(stopping_ || !registered_ || urgent_ || upload_ready || steps_ready || prints_ready))
          cv_.WaitUntil(mu_, wake);
        send_reports = have_reports_ && (urgent_ || Clock::now() >= next_report || stopping_);
        send_prints = !prints_.empty() && Clock::now() >= next_prints;
        send_upload = !uploads_.empty();  // SendOneUpload sends the first that may go, if any
        send_steps = !steps_.empty() && Clock::now() >= next_steps && !draining_;
      }
      if (send_reports && registered_) {
        SendReports(/*periodic=*/Clock::now() >= next_report || stopping_);
        next_report = Clock::now() + kReportPeriod;
        next_prints = Clock::now() + kPrintsPeriod;
      } else {
        if (send_prints && registered_) {
          SendReports(/*periodic=*/false, /*with_reports=*/false);
          next_prints = Clock::now() + kPrintsPeriod;
        }
        if (Clock::now() >= next_report) next_report = Clock::now() + kReportPeriod;
      }
      if (send_upload && registered_) SendOneUpload();
      if (send_steps && registered_) {
        SendSteps();
        next_steps = Clock::now() + kStepsPeriod;
      }
      cv_.NotifyAll();  // Stop() waits for the queues to drain
    }
  }

  std::string address_, token_, agent_id_;
  std::unique_ptr<v1::Collector::Stub> stub_;
  OnDump on_dump_;
  std::thread worker_, reader_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> registered_{false};
  std::atomic<int> failures_logged_{0};
  std::atomic<bool> failing_{false};  // the last call failed (unreachable, refused, bad token)

  Mutex mu_;
  CondVar cv_;
  std::string session_ XT_GUARDED_BY(mu_);
  uint32_t max_message_bytes_ XT_GUARDED_BY(mu_) = 4 << 20;  // gRPC's default until the collector says
  std::vector<v1::RankReport> reports_ XT_GUARDED_BY(mu_);
  bool have_reports_ XT_GUARDED_BY(mu_) = false;
  bool urgent_ XT_GUARDED_BY(mu_) = false;
  std::deque<QueuedUpload> uploads_ XT_GUARDED_BY(mu_);
  std::map<std::string, Clock::time_point> held_ XT_GUARDED_BY(mu_);  // dump rounds whose stacks wait for UPLOAD
  std::optional<Clock::time_point> last_dump_command_ XT_GUARDED_BY(mu_);
  bool draining_ XT_GUARDED_BY(mu_) = false;         // Stop() was called: send everything queued
  std::set<int32_t> ops_sent_ XT_GUARDED_BY(mu_);    // ranks whose op statistics reached this registration
  bool last_state_only_ XT_GUARDED_BY(mu_) = false;  // the last report sent had no op statistics
  std::deque<v1::StepRecord> steps_ XT_GUARDED_BY(mu_);
  std::deque<v1::CallPrint> prints_ XT_GUARDED_BY(mu_);        // collective fingerprints for the next report
  std::deque<v1::NodeEviction> evictions_ XT_GUARDED_BY(mu_);  // this node evicted: for the next report
  bool steps_wanted_ XT_GUARDED_BY(mu_) = true;                // false once the collector said it has no Steps
  bool steps_dropping_ XT_GUARDED_BY(mu_) = false;             // the backlog is over kMaxQueuedSteps (said once)
  std::unique_ptr<grpc::ClientContext> commands_ctx_ XT_GUARDED_BY(mu_);
  grpc::ClientContext* call_ctx_ XT_GUARDED_BY(mu_) = nullptr;  // the unary call under way (CallScope)
};

// A token or CA file by the common rule (common/regular_file.h): a FIFO or a device named there
// must not block or grow the agent. *why: the reason, without the path.
bool ReadFile(const std::string& path, size_t max, std::string* out, std::string* why) {
  return ReadRegularFile(path, FileRule{.what = "token or PEM file", .max_bytes = max}, out, why);
}

}  // namespace

std::unique_ptr<CollectorLink> ConnectToCollector(const std::string& address, const std::string& token_file,
                                                  const std::string& ca_file, std::string* error) {
  UseGrpcDefaults();
  std::string token;
  if (!token_file.empty()) {
    std::string why;
    if (!ReadFile(token_file, 4096, &token, &why)) {
      *error = "the collector token file " + token_file + " (XTIMER_COLLECTOR_TOKEN_FILE) " + why;
      return nullptr;
    }
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ')) token.pop_back();
  }
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!ca_file.empty()) {
    grpc::SslCredentialsOptions opts;
    std::string why;
    if (!ReadFile(ca_file, 1 << 20, &opts.pem_root_certs, &why)) {
      *error = "the collector CA file " + ca_file + " (XTIMER_COLLECTOR_CA) " + why;
      return nullptr;
    }
    creds = grpc::SslCredentials(opts);
  }
  return std::make_unique<GrpcCollectorLink>(address, token, creds);
}

}  // namespace xtimer
