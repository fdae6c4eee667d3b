// Load generator for xtimer_collector, speaking the real gRPC API from several processes.
//
//   collector_load --target 127.0.0.1:18890 --agents 1250 --ranks-per-agent 8 --processes 8
//                  [--period 10] [--steady 30] [--storm] [--own-dumps] [--stack-kb 75] [--culprit R]
//                  [--agents-per-connection 1]
//                  [--token-file F] [--collector-pid PID] [--out DIR] [--metrics HOST:PORT] [--wait 120]
//
// Each process drives its share of the agents with gRPC's callback API: one Commands stream per
// agent, a Report of its ranks every --period seconds (phases spread evenly over the period),
// uploads one at a time per agent (as the node agent does). After --steady seconds, with
// --storm, every agent reports all its ranks hung at once (except the --culprit rank, which never
// times out itself), has every rank's own dump ready (--own-dumps; sent after 2 s unless a DUMP
// came, like the node agent) and, when the collector's DUMP command arrives, uploads every
// rank's stacks for that round (at once, or when the UPLOAD command comes if the DUMP said to
// wait: the collector paces uploads). Prints p50/p99 call latency per kind, when the stacks were
// in the collector (seconds after the storm began), what
// was refused or failed (lost), the dump round's completeness (--out: the collector's folder) and
// the collector's peak RSS (--collector-pid: VmHWM). Exit status 1 when anything was lost.
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collector.grpc.pb.h"
#include "common/grpc_defaults.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

struct Config {
  std::string target = "127.0.0.1:18890";
  std::string token;
  int agents = 1250, ranks_per_agent = 8, processes = 8, agents_per_connection = 1;
  double period_s = 10, steady_s = 30, wait_s = 120;
  bool storm = false, own_dumps = false, no_uploads = false;
  int stack_kb = 75;
  int culprit = -1;
  int collector_pid = 0;
  std::string out_dir, metrics;
  int world() const { return agents * ranks_per_agent; }
};

double Seconds(Clock::time_point t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); }
double Now() { return Seconds(Clock::now()); }

// ---- a realistic stack file (docs/formats.md): ~stack_kb KB, the culprit's main thread elsewhere ----

std::string Frame(const std::string& module, int i, const std::string& function, const std::string& file, int line) {
  char buf[1024];
  std::snprintf(
      buf, sizeof buf,
      "{\"module\":\"%s\",\"offset\":\"0x%x\",\"function\":\"%s\",\"file\":\"%s\",\"line\":%d,\"inlined\":false}",
      module.c_str(), 0x1000 + i * 0x37, function.c_str(), file.c_str(), line);
  return buf;
}

std::string Threads(bool culprit, size_t target_bytes, int rank) {
  const std::string torch = "/usr/lib/python3/dist-packages/torch/lib/libtorch_cuda.so";
  const std::string py = "/usr/bin/python3.11";
  const std::string libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
  const std::string nccl = "/usr/lib/x86_64-linux-gnu/libnccl.so.2";
  std::string main = "{\"tid\":" + std::to_string(40000 + rank) +
                     ",\"name\":\"python3\",\"main\":true,\"holds_gil\":" + (culprit ? "true" : "false") +
                     ",\"state\":\"S\",\"native\":[";
  for (int i = 0; i < 40; ++i) {
    if (i) main += ',';
    main += Frame(py, i, "_PyEval_EvalFrameDefault", "Python/ceval.c", 4000 + i);
  }
  if (culprit) {
    main += "," + Frame(libc, 90, "clock_nanosleep", "sysdeps/unix/sysv/linux/clock_nanosleep.c", 78);
  } else {
    main += "," + Frame(torch, 91,
                        "c10d::ProcessGroupNCCL::allreduce(std::vector<at::Tensor, std::allocator<at::Tensor> >&, "
                        "c10d::AllreduceOptions const&)",
                        "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp", 3100);
    main += "," + Frame(nccl, 92, "ncclAllReduce", "src/collectives.cc", 120);
  }
  main += "],\"python\":[";
  for (int i = 0; i < 30; ++i) {
    if (i) main += ',';
    main += "{\"function\":\"layer_" + std::to_string(i) +
            "_forward\",\"file\":\"/job/model/blocks.py\",\"line\":" + std::to_string(100 + i) + "}";
  }
  main += culprit ? ",{\"function\":\"load_batch\",\"file\":\"/job/train.py\",\"line\":88}"
                  : ",{\"function\":\"all_reduce\",\"file\":\"/usr/lib/python3/dist-packages/torch/distributed/"
                    "distributed_c10d.py\",\"line\":2050}";
  main += "]}";
  std::string out = "[" + main;
  for (int t = 0; out.size() < target_bytes; ++t) {
    std::string th = ",{\"tid\":" + std::to_string(50000 + t) + ",\"name\":\"pt_worker_" + std::to_string(t) +
                     "\",\"main\":false,\"holds_gil\":null,\"state\":\"S\",\"native\":[";
    th += Frame(libc, 1, "clone3", "sysdeps/unix/sysv/linux/x86_64/clone3.S", 81);
    th += "," + Frame(libc, 2, "start_thread", "nptl/pthread_create.c", 442);
    for (int i = 0; i < 20; ++i)
      th += "," + Frame(torch, 10 + i, "at::native::worker_loop_" + std::to_string(i) + "(c10::ThreadPool*)",
                        "aten/src/ATen/ParallelThreadPoolNative.cpp", 50 + i);
    th += "," + Frame(libc, 3, "pthread_cond_wait", "nptl/pthread_cond_wait.c", 618);
    th += "],\"python\":[]}";
    out += th;
  }
  return out + "]";
}

class StackMaker {
 public:
  StackMaker(const Config& c) : c_(c) {
    size_t body = static_cast<size_t>(c.stack_kb) * 1024;
    normal_ = Threads(false, body, 0);
    culprit_ = Threads(true, body, 0);
  }
  std::string Make(int rank) const {
    char ops[512] = "";
    if (rank != c_.culprit)
      std::snprintf(
          ops, sizeof ops,
          "{\"name\":\"ncclAllReduce\",\"kind\":\"collective\",\"stream\":\"0x5581a0c0\",\"comm\":\"3a9f0c12\","
          "\"comm_rank\":%d,\"comm_size\":%d,\"seq\":1234,\"peer\":-1,\"bytes\":67108864,\"state\":\"running\","
          "\"in_flight_s\":302.1}",
          rank, c_.world());
    char head[1024];
    std::snprintf(head, sizeof head,
                  "{\"format\":\"xtimer-stacktrace\",\"version\":1,\"rank\":%d,\"world_size\":%d,\"local_rank\":%d,"
                  "\"host\":\"node-%05d\",\"pid\":%d,\"reason\":\"request\",\"time\":\"2026-11-22T10:15:30.123Z\","
                  "\"symbolized\":true,\"process_state\":{\"code\":\"S\",\"name\":\"sleeping\"},\"inflight_ops\":[%s],"
                  "\"threads\":",
                  rank, c_.world(), rank % c_.ranks_per_agent, rank / c_.ranks_per_agent, 10000 + rank, ops);
    std::string s = head;
    s += rank == c_.culprit ? culprit_ : normal_;
    s += "}";
    return s;
  }
  size_t size() const { return normal_.size(); }

 private:
  const Config& c_;
  std::string normal_, culprit_;
};

// ---- one process's share of agents ----

struct Stats {
  std::mutex mu;
  std::vector<float> register_ms, report_ms, report_storm_ms, upload_ms;  // report_ms: before the storm
  std::vector<float> burst_ms;   // the storm's hang reports, sent at the same moment (in report_storm_ms too)
  std::vector<float> stored_ms;  // accepted uploads: when, after the storm began
  uint64_t reports_ok = 0, reports_unknown = 0, reports_failed = 0, rank_reports_ok = 0;
  uint64_t uploads_accepted = 0, uploads_duplicate = 0, uploads_refused = 0, uploads_failed = 0;
  uint64_t registrations_failed = 0, dumps_received = 0, dumps_in_replies = 0, dumps_waiting = 0, upload_commands = 0;
  uint64_t streams_ended_early = 0;
  uint64_t own_dumps_sent = 0, own_dumps_dropped = 0;
  std::map<std::string, int> errors;  // first few error messages
  void Error(const std::string& what) {
    if (errors.size() < 20) ++errors[what];
  }
};

class Child;

// One asynchronous unary call in flight: deleted by its completion callback.
template <typename Request, typename Reply>
struct UnaryCall {
  grpc::ClientContext ctx;
  Request req;
  Reply reply;
  double t0 = 0;  // when it was sent
};

class Agent {
 public:
  Agent(Child* child, int index, int first_rank) : child_(child), index_(index), first_rank_(first_rank) {}
  bool Register();
  void OpenCommands();
  // `state_only`: without op statistics, as the node agent sends a hang the moment it is found.
  void SendReport(bool hung, bool state_only = false);
  // A command from the collector, on the Commands stream or in a report's reply.
  void OnCommand(const xtimer::v1::Command& cmd);
  void OnDump(const std::string& dump_id, bool wait);
  void OnUploadCommand(const std::string& dump_id);
  void HoldOwnDumps(double now);
  int OwnDumps() const;
  void ReleaseOwnDumps(double now);
  void QueueUploads(const std::string& dump_id, bool skip_culprit = false);
  bool Done();
  void Cancel();

 private:
  friend class CommandReader;
  void UploadNext();
  void Prepare(grpc::ClientContext* ctx, double deadline_s);

  Child* child_;
  int index_, first_rank_;
  std::string session_;
  std::mutex mu_;
  std::deque<std::pair<std::string, int>> uploads_;  // (dump_id, rank)
  bool uploading_ = false, got_dump_ = false;
  std::string held_;          // a round's stacks waiting for UPLOAD
  double own_dumps_due_ = 0;  // > 0: own dumps ready, sent at this time unless a DUMP comes
  bool hung_ = false;
  std::unique_ptr<grpc::ClientContext> commands_ctx_;
  class CommandReader* reader_ = nullptr;
  std::atomic<bool> stream_done_{false};
};

class CommandReader : public grpc::ClientReadReactor<xtimer::v1::Command> {
 public:
  CommandReader(Agent* agent) : agent_(agent) {}
  void Start() {
    StartRead(&cmd_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    agent_->OnCommand(cmd_);
    StartRead(&cmd_);
  }
  void OnDone(const grpc::Status& s) override;

 private:
  Agent* agent_;
  xtimer::v1::Command cmd_;
};

class Child {
 public:
  Child(const Config& c, int first_agent, int end_agent) : c_(c), maker_(c) {
    int per = c.agents_per_connection;
    int n_channels = std::max(1, (end_agent - first_agent + per - 1) / per);
    for (int i = 0; i < n_channels; ++i) {
      grpc::ChannelArguments args;
      args.SetInt("xtimer.load.channel", i);  // own connection per channel
      args.SetMaxSendMessageSize(64 << 20);
      stubs_.push_back(xtimer::v1::Collector::NewStub(
          grpc::CreateCustomChannel(c.target, grpc::InsecureChannelCredentials(), args)));
    }
    for (int a = first_agent; a < end_agent; ++a)
      agents_.push_back(std::make_unique<Agent>(this, a, a * c.ranks_per_agent));
  }

  xtimer::v1::Collector::Stub* Stub(int agent) {
    return stubs_[agent % stubs_.size()].get();
  }  // own connection per agent by default
  const Config& config() const { return c_; }
  const StackMaker& maker() const { return maker_; }
  Stats& stats() { return stats_; }
  bool storming() const { return storming_; }
  double storm_at() const { return storm_at_; }

  bool Setup() {
    for (auto& a : agents_)
      if (!a->Register()) return false;
    for (auto& a : agents_) a->OpenCommands();
    return true;
  }

  void Run(double start) {
    // Steady phase: each agent reports every period, phases spread over the period.
    size_t n = agents_.size();
    std::vector<double> next(n);
    for (size_t i = 0; i < n; ++i) next[i] = start + c_.period_s * (static_cast<double>(i) + 0.5) / n;
    double storm_at = start + c_.steady_s;
    storm_at_ = c_.storm ? storm_at : 1e300;
    double end = c_.storm ? storm_at + c_.wait_s : storm_at;
    bool stormed = false;
    while (true) {
      double now = Now();
      if (c_.storm && !stormed && now >= storm_at) {
        stormed = true;
        storming_ = true;
        for (auto& a : agents_) a->SendReport(true, /*state_only=*/true);
        if (c_.own_dumps)
          for (auto& a : agents_) a->HoldOwnDumps(now);
      }
      if (stormed && c_.own_dumps)
        for (auto& a : agents_) a->ReleaseOwnDumps(now);
      if (now >= end) break;
      if (stormed) {
        bool all = true;
        for (auto& a : agents_) all = all && a->Done();
        if (all) break;
      }
      for (size_t i = 0; i < n; ++i)
        if (now >= next[i]) {
          agents_[i]->SendReport(stormed);
          next[i] += c_.period_s;
        }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    // Let the last calls finish.
    for (int i = 0; i < 400 && inflight_ > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
    for (auto& a : agents_) a->Cancel();
  }

  std::atomic<int> inflight_{0};

 private:
  const Config& c_;
  StackMaker maker_;
  std::vector<std::unique_ptr<xtimer::v1::Collector::Stub>> stubs_;
  std::vector<std::unique_ptr<Agent>> agents_;
  Stats stats_;
  std::atomic<bool> storming_{false};
  double storm_at_ = 1e300;
};

void Agent::Prepare(grpc::ClientContext* ctx, double deadline_s) {
  if (!child_->config().token.empty()) ctx->AddMetadata("authorization", "Bearer " + child_->config().token);
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(deadline_s * 1000)));
}

bool Agent::Register() {
  const Config& c = child_->config();
  xtimer::v1::RegisterRequest req;
  req.set_protocol_version(1);
  char node[32];
  std::snprintf(node, sizeof node, "node-%05d", index_);
  req.set_node(node);
  req.set_agent_id(std::string("load-") + node);
  for (int r = first_rank_; r < first_rank_ + c.ranks_per_agent; ++r) {
    auto* m = req.add_ranks();
    m->set_rank(r);
    m->set_local_rank(r - first_rank_);
    m->set_world_size(c.world());
    m->set_host(node);
    m->set_pid(10000 + r);
  }
  for (int attempt = 0; attempt < 5; ++attempt) {
    grpc::ClientContext ctx;
    Prepare(&ctx, 30);
    xtimer::v1::RegisterReply reply;
    double t0 = Now();
    grpc::Status st = child_->Stub(index_)->Register(&ctx, req, &reply);
    std::lock_guard<std::mutex> lock(child_->stats().mu);
    if (st.ok()) {
      child_->stats().register_ms.push_back(static_cast<float>((Now() - t0) * 1000));
      session_ = reply.session();
      return true;
    }
    ++child_->stats().registrations_failed;
    child_->stats().Error("register: " + st.error_message());
  }
  return false;
}

void Agent::OpenCommands() {
  commands_ctx_ = std::make_unique<grpc::ClientContext>();
  if (!child_->config().token.empty()) commands_ctx_->AddMetadata("authorization", "Bearer " + child_->config().token);
  xtimer::v1::CommandsRequest req;
  req.set_session(session_);
  reader_ = new CommandReader(this);
  child_->Stub(index_)->async()->Commands(commands_ctx_.get(), &req, reader_);
  reader_->Start();
}

void CommandReader::OnDone(const grpc::Status& s) {
  if (!s.ok() && s.error_code() != grpc::StatusCode::CANCELLED) {
    std::lock_guard<std::mutex> lock(agent_->child_->stats().mu);
    ++agent_->child_->stats().streams_ended_early;
    agent_->child_->stats().Error("commands: " + s.error_message());
  }
  agent_->stream_done_ = true;
  delete this;
}

void Agent::Cancel() {
  if (commands_ctx_) commands_ctx_->TryCancel();
  for (int i = 0; i < 200 && !stream_done_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

void Agent::SendReport(bool hung, bool state_only) {
  const Config& c = child_->config();
  auto* call = new UnaryCall<xtimer::v1::ReportRequest, xtimer::v1::ReportReply>;
  Prepare(&call->ctx, 30);
  call->req.set_session(session_);
  int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  static const char* kOps[][2] = {{"ncclAllReduce", "collective"},     {"ncclAllGather", "collective"},
                                  {"ncclReduceScatter", "collective"}, {"cublasGemmEx", "matmul"},
                                  {"cublasLtMatmul", "matmul"},        {"flash_fwd_kernel", "kernel"},
                                  {"elementwise_kernel", "kernel"},    {"cudaMemcpyAsync", "memcpy"}};
  for (int r = first_rank_; r < first_rank_ + c.ranks_per_agent; ++r) {
    auto* rr = call->req.add_reports();
    auto* m = rr->mutable_rank();
    m->set_rank(r);
    m->set_local_rank(r - first_rank_);
    m->set_world_size(c.world());
    m->set_host("node-" + std::to_string(index_));
    m->set_pid(10000 + r);
    rr->set_time_unix_ms(now_ms);
    bool h = hung && r != c.culprit;
    rr->set_state(h ? xtimer::v1::RANK_STATE_HUNG : xtimer::v1::RANK_STATE_RUNNING);
    if (h) {
      rr->set_trigger("ncclAllReduce #1234 on comm 3a9f0c12 running for 302.1 s");
      rr->set_oldest_inflight_s(302.1);
      rr->set_oldest_inflight_op("ncclAllReduce");
    }
    for (auto& op : kOps) {
      if (state_only) break;
      auto* o = rr->add_ops();
      o->set_name(op[0]);
      o->set_kind(op[1]);
      o->set_count(1000);
      o->set_mean_us(500);
      o->set_p50_us(450);
      o->set_p99_us(900);
      o->set_max_us(1500);
      o->set_total_ms(500);
      if (std::string(op[1]) == "matmul") o->set_tflops(300), o->set_shape("4096 x 4096 x 4096");
      if (std::string(op[1]) == "collective")
        o->set_busbw_gbps(180), o->set_algbw_gbps(95), o->set_bytes(1 << 26), o->set_comm("3a9f0c12");
    }
  }
  call->t0 = Now();
  ++child_->inflight_;
  Child* child = child_;
  int ranks = c.ranks_per_agent;
  bool burst = state_only;  // only the storm sends state-only reports
  child_->Stub(index_)->async()->Report(
      &call->ctx, &call->req, &call->reply, [this, call, child, ranks, burst](grpc::Status st) {
        double ms = (Now() - call->t0) * 1000;
        if (st.ok() && call->reply.command().kind() == xtimer::v1::Command::DUMP) {
          OnCommand(call->reply.command());
          std::lock_guard<std::mutex> lock(child->stats().mu);
          ++child->stats().dumps_in_replies;
        }
        {
          std::lock_guard<std::mutex> lock(child->stats().mu);
          Stats& s = child->stats();
          (call->t0 >= child->storm_at() ? s.report_storm_ms : s.report_ms).push_back(static_cast<float>(ms));
          if (burst) s.burst_ms.push_back(static_cast<float>(ms));
          if (!st.ok()) ++s.reports_failed, s.Error("report: " + st.error_message());
          else if (!call->reply.known()) ++s.reports_unknown;
          else ++s.reports_ok, s.rank_reports_ok += ranks;
        }
        --child->inflight_;
        delete call;
      });
  if (hung) {
    std::lock_guard<std::mutex> lock(mu_);
    hung_ = true;
  }
}

void Agent::OnCommand(const xtimer::v1::Command& cmd) {
  if (cmd.kind() == xtimer::v1::Command::DUMP) OnDump(cmd.dump_id(), cmd.wait_for_upload());
  if (cmd.kind() == xtimer::v1::Command::UPLOAD) OnUploadCommand(cmd.dump_id());
}

void Agent::OnDump(const std::string& dump_id, bool wait) {
  bool dropped_own;
  {
    std::lock_guard<std::mutex> lock(mu_);
    got_dump_ = true;
    dropped_own = own_dumps_due_ > 0;  // the round gets these ranks' stacks: own copies not sent
    own_dumps_due_ = 0;
    if (wait) held_ = dump_id;
  }
  {
    std::lock_guard<std::mutex> lock(child_->stats().mu);
    ++child_->stats().dumps_received;
    if (wait) ++child_->stats().dumps_waiting;
    if (dropped_own) child_->stats().own_dumps_dropped += OwnDumps();
  }
  if (!wait && !child_->config().no_uploads) QueueUploads(dump_id);
}

void Agent::OnUploadCommand(const std::string& dump_id) {
  bool go;
  {
    std::lock_guard<std::mutex> lock(mu_);
    go = held_ == dump_id;
    if (go) held_.clear();
  }
  {
    std::lock_guard<std::mutex> lock(child_->stats().mu);
    ++child_->stats().upload_commands;
  }
  if (go && !child_->config().no_uploads) QueueUploads(dump_id);
}

// Every hung rank (all but the culprit) has dumped on its own.
int Agent::OwnDumps() const {
  int c = child_->config().culprit;
  int n = child_->config().ranks_per_agent;
  return c >= first_rank_ && c < first_rank_ + n ? n - 1 : n;
}

void Agent::HoldOwnDumps(double now) {
  bool dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dropped = got_dump_;  // the round's DUMP came first
    if (!dropped) own_dumps_due_ = now + 2;
  }
  if (dropped) {
    std::lock_guard<std::mutex> lock(child_->stats().mu);
    child_->stats().own_dumps_dropped += OwnDumps();
  }
}

void Agent::ReleaseOwnDumps(double now) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (own_dumps_due_ == 0 || now < own_dumps_due_) return;
    own_dumps_due_ = 0;
  }
  {
    std::lock_guard<std::mutex> lock(child_->stats().mu);
    child_->stats().own_dumps_sent += OwnDumps();
  }
  QueueUploads("", /*skip_culprit=*/true);
}

void Agent::QueueUploads(const std::string& dump_id, bool skip_culprit) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int r = first_rank_; r < first_rank_ + child_->config().ranks_per_agent; ++r)
      if (!(skip_culprit && r == child_->config().culprit)) uploads_.emplace_back(dump_id, r);
    if (uploading_) return;
    uploading_ = true;
  }
  UploadNext();
}

void Agent::UploadNext() {
  std::pair<std::string, int> next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (uploads_.empty()) {
      uploading_ = false;
      return;
    }
    next = uploads_.front();
    uploads_.pop_front();
  }
  auto* call = new UnaryCall<xtimer::v1::StackUpload, xtimer::v1::UploadReply>;
  Prepare(&call->ctx, 60);
  call->req.set_session(session_);
  call->req.set_dump_id(next.first);
  call->req.set_rank(next.second);
  call->req.set_stack_json(child_->maker().Make(next.second));
  call->t0 = Now();
  ++child_->inflight_;
  Child* child = child_;
  child_->Stub(index_)->async()->UploadStacks(
      &call->ctx, &call->req, &call->reply, [this, call, child](grpc::Status st) {
        double ms = (Now() - call->t0) * 1000;
        {
          std::lock_guard<std::mutex> lock(child->stats().mu);
          Stats& s = child->stats();
          s.upload_ms.push_back(static_cast<float>(ms));
          if (!st.ok()) ++s.uploads_failed, s.Error("upload: " + st.error_message());
          else if (!call->reply.accepted()) ++s.uploads_refused, s.Error("upload refused: " + call->reply.reason());
          else if (!call->reply.reason().empty()) ++s.uploads_duplicate;
          else ++s.uploads_accepted, s.stored_ms.push_back(static_cast<float>((Now() - child->storm_at()) * 1000));
        }
        --child->inflight_;
        delete call;
        UploadNext();
      });
}

bool Agent::Done() {
  std::lock_guard<std::mutex> lock(mu_);
  return got_dump_ && held_.empty() && own_dumps_due_ == 0 && !uploading_ && uploads_.empty();
}

// ---- the parent: fork, start together, gather ----

json StatsToJson(Stats& s) {
  std::lock_guard<std::mutex> lock(s.mu);
  return {{"register_ms", s.register_ms},
          {"report_ms", s.report_ms},
          {"report_storm_ms", s.report_storm_ms},
          {"burst_ms", s.burst_ms},
          {"upload_ms", s.upload_ms},
          {"stored_ms", s.stored_ms},
          {"reports_ok", s.reports_ok},
          {"reports_unknown", s.reports_unknown},
          {"reports_failed", s.reports_failed},
          {"rank_reports_ok", s.rank_reports_ok},
          {"uploads_accepted", s.uploads_accepted},
          {"uploads_duplicate", s.uploads_duplicate},
          {"uploads_refused", s.uploads_refused},
          {"uploads_failed", s.uploads_failed},
          {"registrations_failed", s.registrations_failed},
          {"dumps_received", s.dumps_received},
          {"dumps_in_replies", s.dumps_in_replies},
          {"dumps_waiting", s.dumps_waiting},
          {"upload_commands", s.upload_commands},
          {"own_dumps_sent", s.own_dumps_sent},
          {"own_dumps_dropped", s.own_dumps_dropped},
          {"streams_ended_early", s.streams_ended_early},
          {"errors", s.errors}};
}

std::string Percentiles(std::vector<float> v) {
  if (v.empty()) return "n=0";
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))]; };
  char buf[160];
  std::snprintf(buf, sizeof buf, "n=%zu p50=%.1f ms p99=%.1f ms max=%.1f ms", v.size(), at(0.5), at(0.99), v.back());
  return buf;
}

double P99(std::vector<float> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(0.99 * v.size()))];
}

// utime + stime of a process, in seconds.
double CpuSeconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  size_t close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; rest >> field; ++i)
    if (i == 14 || i == 15) ticks += std::stod(field);
  return ticks / sysconf(_SC_CLK_TCK);
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a;
  in >> a;
  return a;
}

long VmHwmKiB(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr, "collector_load: %s\n(see the comment at the top of tests/collector/collector_load.cc)\n",
               why.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  xtimer::UseGrpcDefaults();
  Config c;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) Usage(a + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "--target") c.target = val();
      else if (a == "--agents") c.agents = std::stoi(val());
      else if (a == "--ranks-per-agent") c.ranks_per_agent = std::stoi(val());
      else if (a == "--processes") c.processes = std::stoi(val());
      else if (a == "--agents-per-connection") c.agents_per_connection = std::max(1, std::stoi(val()));
      else if (a == "--period") c.period_s = std::stod(val());
      else if (a == "--steady") c.steady_s = std::stod(val());
      else if (a == "--wait") c.wait_s = std::stod(val());
      else if (a == "--storm") c.storm = true;
      else if (a == "--own-dumps") c.own_dumps = true;
      else if (a == "--no-uploads") c.no_uploads = true;  // the storm's reports alone (an experiment)
      else if (a == "--stack-kb") c.stack_kb = std::stoi(val());
      else if (a == "--culprit") c.culprit = std::stoi(val());
      else if (a == "--collector-pid") c.collector_pid = std::stoi(val());
      else if (a == "--out") c.out_dir = val();
      else if (a == "--metrics") c.metrics = val();
      else if (a == "--token-file") {
        std::ifstream in(val());
        std::getline(in, c.token);
        while (!c.token.empty() && isspace(static_cast<unsigned char>(c.token.back()))) c.token.pop_back();
      } else Usage("unknown option " + a);
    } catch (const std::exception&) {
      Usage(a + " needs a number");
    }
  }
  if (c.agents < 1 || c.ranks_per_agent < 1 || c.processes < 1 || c.period_s <= 0)
    Usage("counts and period must be positive");
  c.processes = std::min(c.processes, c.agents);

  std::string tmp = (fs::temp_directory_path() / ("collector_load." + std::to_string(getpid()))).string();
  fs::create_directories(tmp);
  std::vector<int> ready_pipes, go_pipes;
  std::vector<pid_t> pids;
  double t_setup = Now();
  for (int p = 0; p < c.processes; ++p) {
    int ready[2], go[2];
    if (pipe(ready) != 0 || pipe(go) != 0) Usage("pipe failed");
    pid_t pid = fork();
    if (pid == 0) {
      close(ready[0]);
      close(go[1]);
      int first = c.agents * p / c.processes, end = c.agents * (p + 1) / c.processes;
      Child child(c, first, end);
      char ok = child.Setup() ? 'r' : 'x';
      (void)!write(ready[1], &ok, 1);
      double start = 0;
      if (read(go[0], &start, sizeof start) != sizeof start) _exit(3);
      if (ok == 'r') child.Run(start);
      std::ofstream(tmp + "/child-" + std::to_string(p) + ".json") << StatsToJson(child.stats()).dump();
      std::fflush(nullptr);
      _exit(0);
    }
    close(ready[1]);
    close(go[0]);
    ready_pipes.push_back(ready[0]);
    go_pipes.push_back(go[1]);
    pids.push_back(pid);
  }
  int ready_count = 0;
  for (int fd : ready_pipes) {
    char r = 0;
    if (read(fd, &r, 1) == 1 && r == 'r') ++ready_count;
    close(fd);
  }
  double setup_s = Now() - t_setup;
  double collector_cpu0 = c.collector_pid > 0 ? CpuSeconds(c.collector_pid) : 0;
  std::string load_before = LoadAverage();
  double start = Now() + 0.5;
  for (int fd : go_pipes) {
    (void)!write(fd, &start, sizeof start);
    close(fd);
  }
  double generator_cpu = 0;
  for (pid_t pid : pids) {
    rusage ru = {};
    wait4(pid, nullptr, 0, &ru);
    generator_cpu += ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  }
  double run_s = Now() - start;
  double collector_cpu = c.collector_pid > 0 ? CpuSeconds(c.collector_pid) - collector_cpu0 : 0;
  double storm_at = start + c.steady_s;

  // Gather.
  json all = {{"register_ms", json::array()}, {"report_ms", json::array()}, {"upload_ms", json::array()}};
  std::vector<float> reg, rep, rep_storm, burst, up, stored;
  std::map<std::string, uint64_t> n;
  std::map<std::string, int> errors;
  for (int p = 0; p < c.processes; ++p) {
    std::ifstream in(tmp + "/child-" + std::to_string(p) + ".json");
    json j = json::parse(in, nullptr, false);
    if (j.is_discarded()) {
      std::fprintf(stderr, "collector_load: process %d left no result\n", p);
      ++n["processes_lost"];
      continue;
    }
    for (float v : j["register_ms"]) reg.push_back(v);
    for (float v : j["report_ms"]) rep.push_back(v);
    for (float v : j["report_storm_ms"]) rep_storm.push_back(v);
    for (float v : j["burst_ms"]) burst.push_back(v);
    for (float v : j["upload_ms"]) up.push_back(v);
    for (float v : j["stored_ms"]) stored.push_back(v);
    for (auto& [k, v] : j.items())
      if (v.is_number_unsigned()) n[k] += v.get<uint64_t>();
    for (auto& [k, v] : j["errors"].items()) errors[k] += v.get<int>();
  }
  fs::remove_all(tmp);
  std::vector<float> calls = rep;
  calls.insert(calls.end(), rep_storm.begin(), rep_storm.end());
  calls.insert(calls.end(), up.begin(), up.end());

  StackMaker maker(c);
  std::printf("collector_load: %d ranks (%d agents x %d ranks, %d processes), reports every %g s for %g s%s\n",
              c.world(), c.agents, c.ranks_per_agent, c.processes, c.period_s, c.steady_s,
              c.storm ? (", then a storm: every rank hung at once" + std::string(c.own_dumps ? ", own dumps" : "") +
                         ", stacks of " + std::to_string(maker.Make(0).size() / 1024) + " KB")
                            .c_str()
                      : "");
  std::printf("  setup (register + open streams): %.1f s, %d of %d processes ready\n", setup_s, ready_count,
              c.processes);
  std::printf("  register: %s\n", Percentiles(reg).c_str());
  std::printf("  report, steady: %s\n", Percentiles(rep).c_str());
  if (c.storm) {
    std::printf("  report, storm:  %s\n", Percentiles(rep_storm).c_str());
    std::printf("  hang reports sent at once (the burst): %s\n", Percentiles(burst).c_str());
  }
  std::printf("  reports: ok %lu, unknown session %lu, failed %lu\n", (unsigned long)n["reports_ok"],
              (unsigned long)n["reports_unknown"], (unsigned long)n["reports_failed"]);
  std::printf("  upload (storm): %s; accepted %lu, duplicate %lu, refused %lu, failed %lu\n", Percentiles(up).c_str(),
              (unsigned long)n["uploads_accepted"], (unsigned long)n["uploads_duplicate"],
              (unsigned long)n["uploads_refused"], (unsigned long)n["uploads_failed"]);
  std::printf("  all report+upload calls: %s\n", Percentiles(calls).c_str());
  if (c.storm) {
    std::printf(
        "  DUMP commands received: %lu of %d agents, %lu in a report's reply (%lu to hold the stacks until "
        "UPLOAD; UPLOAD received: %lu)\n",
        (unsigned long)n["dumps_received"], c.agents, (unsigned long)n["dumps_in_replies"],
        (unsigned long)n["dumps_waiting"], (unsigned long)n["upload_commands"]);
    if (c.own_dumps)
      std::printf("  own dumps: %lu sent, %lu not sent (a DUMP came within 2 s: the round has them)\n",
                  (unsigned long)n["own_dumps_sent"], (unsigned long)n["own_dumps_dropped"]);
    std::printf("  stacks accepted by the collector, time after the storm began: %s\n", Percentiles(stored).c_str());
  }
  for (auto& [e, k] : errors) std::printf("  error x%d: %s\n", k, e.c_str());

  uint64_t lost = n["reports_unknown"] + n["reports_failed"] + n["uploads_refused"] + n["uploads_failed"] +
                  n["registrations_failed"] + n["streams_ended_early"] + n["processes_lost"];
  bool round_ok = true;
  if (c.storm && !c.out_dir.empty()) {
    // The round the storm started: the newest folder with verdict.json (wait for the merge).
    double deadline = Now() + c.wait_s;
    std::string verdict;
    while (Now() < deadline && verdict.empty()) {
      fs::file_time_type newest = fs::file_time_type::min();
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(c.out_dir, ec))
        if (fs::exists(e.path() / "verdict.json") && e.last_write_time() >= newest)
          newest = e.last_write_time(), verdict = (e.path() / "verdict.json").string();
      if (verdict.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    double merged_after = Now() - storm_at;
    if (verdict.empty()) {
      std::printf("  round: no verdict.json under %s within %g s\n", c.out_dir.c_str(), c.wait_s);
      round_ok = false;
    } else {
      std::ifstream in(verdict);
      json v = json::parse(in, nullptr, false);
      size_t reported = v.is_discarded() ? 0 : v["ranks_reported"].size();
      size_t missing = v.is_discarded() ? 0 : v["ranks_missing"].size();
      std::string suspects;
      if (!v.is_discarded())
        for (auto& s : v["suspects"]) {
          if (suspects.size() > 80) break;
          suspects += (suspects.empty() ? "" : ", ") + std::to_string(s["rank"].get<int>());
        }
      round_ok = reported == static_cast<size_t>(c.world()) && missing == 0;
      std::printf(
          "  round: %s: %zu of %d ranks, %zu missing, suspects [%s] (verdict seen %.1f s after the storm began)\n",
          verdict.c_str(), reported, c.world(), missing, suspects.c_str(), merged_after);
    }
  }
  if (!c.metrics.empty()) {
    std::string host = c.metrics.substr(0, c.metrics.rfind(':'));
    int port = std::stoi(c.metrics.substr(c.metrics.rfind(':') + 1));
    httplib::Client http(host, port);
    http.set_read_timeout(60, 0);
    auto res = http.Get("/metrics");
    if (res && res->status == 200) {
      auto value = [&](const std::string& series) -> double {
        size_t p = res->body.find("\n" + series + " ");
        return p == std::string::npos ? -1 : std::stod(res->body.substr(p + series.size() + 2));
      };
      double got = value("xtimer_collector_rank_reports_total{result=\"ok\"}");
      std::printf("  collector counted %.0f rank reports (clients got %lu answered), /metrics %zu KB\n", got,
                  (unsigned long)n["rank_reports_ok"], res->body.size() / 1024);
      if (got >= 0 && got < static_cast<double>(n["rank_reports_ok"]))
        lost += n["rank_reports_ok"] - static_cast<uint64_t>(got);
    } else {
      std::printf("  /metrics of %s not read\n", c.metrics.c_str());
    }
  }
  std::printf(
      "  CPU over the %.1f s run: collector %.1f s, generator processes %.1f s (all cores: %.1f s); load average "
      "before %s, after %s\n",
      run_s, collector_cpu, generator_cpu, sysconf(_SC_NPROCESSORS_ONLN) * run_s, load_before.c_str(),
      LoadAverage().c_str());
  if (c.collector_pid > 0) {
    long kib = VmHwmKiB(c.collector_pid);
    std::printf("  collector peak RSS (VmHWM): %.1f MiB\n", kib / 1024.0);
  }
  std::printf("  p99 of report+upload calls: %.1f ms (goal < 100); lost: %lu; round complete: %s\n", P99(calls),
              (unsigned long)lost, c.storm && !c.out_dir.empty() ? (round_ok ? "yes" : "NO") : "n/a");
  return lost == 0 && round_ok && ready_count == c.processes ? 0 : 1;
}
