#include "launcher/agent/node_agent.h"

#include <httplib.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "common/atomic_file.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/http_server.h"
#include "common/log.h"
#include "common/prometheus_text.h"
#include "common/rank_metrics.h"
#include "common/regular_file.h"
#include "slowdown/slowdown_metrics.h"
#include "slowdown/slowdown_verdict_json.h"
#include "common/stacks/stack_reader.h"
#include "common/stacks/stack_symbolize.h"
#include "common/stacks/symbolizer.h"

namespace xtimer {
namespace {

// Whether `pid` has a handler for `sig` (SigCgt in /proc/<pid>/status).
bool CatchesSignal(pid_t pid, int sig) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
    return sig >= 1 && sig <= 64 && ((mask >> (sig - 1)) & 1) != 0;
  }
  return false;
}

}  // namespace

AgentConfig AgentConfig::FromEnv() {
  AgentConfig c;
  c.timeline_path = env::String("XTIMER_TIMELINE_PATH");
  c.metrics_port = static_cast<int>(env::Int("XTIMER_METRICS_PORT"));
  c.collector = env::String("XTIMER_COLLECTOR");
  c.token_file = env::String("XTIMER_COLLECTOR_TOKEN_FILE");
  c.ca_file = env::String("XTIMER_COLLECTOR_CA");
  c.dump_wait_s = env::Double("XTIMER_DUMP_WAIT");
  c.node_name = env::String("XTIMER_NODE_NAME");
  if (c.node_name.empty()) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    c.node_name = host;
  }
  return c;
}

NodeAgent::NodeAgent(AgentConfig config) : config_(std::move(config)) {}

NodeAgent::~NodeAgent() { Stop(); }

bool NodeAgent::Start(std::string* error) {
  char dir[] = "/tmp/xtimer-agent-XXXXXX";
  if (mkdtemp(dir) == nullptr) {
    *error = "cannot create a folder for the agent socket in /tmp";
    return false;
  }
  socket_dir_ = dir;
  if (!channel_.Listen(SocketPath(), error)) return false;

  if (config_.collector.empty()) {
    link_ = EmbeddedCollector(config_.timeline_path, config_.dump_wait_s);
  } else {
    std::string link_error;
    link_ = ConnectToCollector(config_.collector, config_.token_file, config_.ca_file, &link_error);
    if (!link_) Log(LogLevel::kError, "agent: %s; not reporting to a collector", link_error.c_str());
  }
  if (link_) {
    link_->SetSlowdownHandlers([this](int32_t rank, double seconds, double hz) { OnSampleRequest(rank, seconds, hz); },
                               [this](const slowdown::Verdict& verdict) { OnVerdict(verdict); });
    link_->SetOutOfStepHandler([this](int32_t rank, const std::string& comm, const std::string& reason) {
      OnCollectorDesync(rank, comm, reason);
    });
    link_->Start([this](const std::string& id) { OnDumpRequest(id); });
  }

  channel_.Start([this](int conn, const nlohmann::json& msg) { OnRankMessage(conn, msg); },
                 [this](int conn) { registry_.OnClose(conn); });
  symbolize_thread_ = std::thread([this] { SymbolizeLoop(); });
  StartMetrics();
  StartSaver();
  return true;
}

// The node's checkpoint saver runs here, so in-memory checkpoints are persisted behind the
// job and, when a rank dies, its newest snapshot is written before the agent exits. If a
// saver already holds the node's lock (another job's agent, a standalone saver), that one serves.
void NodeAgent::StartSaver() {
  ckpt::SaverOptions options;
  options.shm_dir = env::String("XTIMER_CKPT_SHM_DIR");
  options.idle_exit_s = -1;  // as long as the agent runs
  options.progress = isatty(STDERR_FILENO) != 0;
  saver_ = std::make_unique<ckpt::Saver>(options);
  std::string why;
  if (!saver_->AcquireNodeLock(&why)) {
    Log(LogLevel::kDebug, "agent: not the checkpoint saver: %s", why.c_str());
    saver_.reset();
    return;
  }
  saver_->WritePid();
  saver_thread_ = std::thread([this] { saver_->Run(&saver_stop_); });
}

// The command ended: write what is still pending (a dead rank's newest snapshot included)
// before we exit, so nothing saved in memory is lost with the node.
void NodeAgent::FinishSaver() {
  if (!saver_) return;
  saver_stop_ = true;
  if (saver_thread_.joinable()) saver_thread_.join();
  for (int i = 0; i < 6000 && saver_->PollOnce(); ++i) usleep(100 * 1000);  // at most 10 minutes
  saver_->RemoveFinishedSegments(true);
  saver_->ReleaseNodeLock();
  saver_.reset();
}

void NodeAgent::OnRankMessage(int conn, const nlohmann::json& msg) {
  if (msg.value("type", "") == "steps") return OnSteps(msg);
  if (msg.value("type", "") == "prints") return OnPrints(msg);
  std::string request_id;
  registry_.OnMessage(conn, msg, &request_id);
  if (msg.value("type", "") == "dump_written") {
    MutexLock lock(mu_);
    dumps_.push_back(Dump{msg.value("path", ""), msg.value("rank", -1), request_id});
    cv_.NotifyAll();
  }
}

// A rank's step records go to the collector's slowdown judge, stamped with this node's name
// (ranks of one agent are one node to the judge: one clock, one network).
void NodeAgent::OnSteps(const nlohmann::json& msg) {
  std::vector<slowdown::StepRecord> records;
  std::string why;
  size_t bad = StepRecordsOf(msg, &records, &why);
  if (bad > 0) {
    const int64_t now = static_cast<int64_t>(WallNs() / 1000000);
    int64_t last = steps_warned_ms_;
    if (now - last >= 60000 && steps_warned_ms_.compare_exchange_strong(last, now))
      Log(LogLevel::kWarn,
          "agent: rank %s sent %zu step record(s) that cannot be used (%s); dropped (said once a minute)",
          msg.contains("rank") ? msg["rank"].dump().substr(0, 24).c_str() : "?", bad, why.c_str());
  }
  if (!link_ || records.empty()) return;
  for (slowdown::StepRecord& r : records) r.node = config_.node_name;
  link_->Steps(std::move(records));
}

// The judge suspects `rank` of a host-side slowdown (or wants it as the peer to compare with):
// the rank samples its main thread's Python stack and puts the counts in its next records.
void NodeAgent::OnSampleRequest(int32_t rank, double seconds, double hz) {
  int conn = registry_.ConnectionOfRank(rank);
  std::string msg = nlohmann::json{{"type", "sample"}, {"seconds", seconds}, {"hz", hz}}.dump();
  if (conn < 0 || !channel_.Send(conn, msg)) {
    Log(LogLevel::kDebug, "agent: rank %d cannot be asked for Python samples (not running here)", rank);
    return;
  }
  Log(LogLevel::kInfo, "agent: asked rank %d for %g s of Python stack samples at %g Hz (slowdown judge)", rank, seconds,
      hz);
}

// Each new verdict: XTIMER_TIMELINE_PATH/slowdown.json rewritten whole, /metrics from it.
void NodeAgent::OnVerdict(const slowdown::Verdict& v) {
  {
    MutexLock lock(slow_mu_);
    bool fresh = v.updated != verdict_.updated;
    verdict_ = v;
    if (!fresh) return;
    if (watch_evictions_) KeepVerdict(&evict_history_, v, evict_thresholds_);
  }
  if (config_.timeline_path.empty()) return;
  std::string error;
  AtomicWrite how;
  how.sync = false;  // rewritten every few seconds: whole for readers is enough
  if (MakeDirs(config_.timeline_path, &error) &&
      WriteFileAtomically(config_.timeline_path + "/slowdown.json", slowdown::VerdictText(v), &error, how))
    return;
  MutexLock lock(slow_mu_);
  if (!slowdown_write_warned_) Log(LogLevel::kWarn, "agent: cannot write slowdown.json: %s (said once)", error.c_str());
  slowdown_write_warned_ = true;
}

// The collector wants every rank's stacks: ask each local rank (its dump_written answer
// carries the request id back), except those that just dumped for a hang of their own, whose
// dump is sent (again) for this round.
void NodeAgent::OnDumpRequest(const std::string& dump_id) {
  last_dump_request_ms_ = WallMs();
  RankRegistry::DumpPlan plan = registry_.PlanDump(config_.dump_wait_s);
  std::string msg = nlohmann::json{{"type", "dump"}, {"request_id", dump_id}}.dump();
  int asked = 0;
  for (int conn : plan.ask) asked += channel_.Send(conn, msg);
  for (auto [pid, sig] : plan.signal) {
    // A signal the process does not catch would kill it: only to a handler (ours, installed at
    // load; the program may have replaced it, then it gets the signal it chose to handle).
    if (!CatchesSignal(pid, sig)) {
      Log(LogLevel::kDebug, "agent: pid %d no longer catches signal %d; not asked to dump", static_cast<int>(pid), sig);
      continue;
    }
    registry_.NoteSignalled(pid, dump_id);
    asked += kill(pid, sig) == 0;
  }
  {
    MutexLock lock(mu_);
    for (auto& [rank, path] : plan.reuse) dumps_.push_back(Dump{path, rank, dump_id});
    cv_.NotifyAll();
  }
  Log(LogLevel::kDebug, "agent: dump %s requested by the collector; asked %d local rank(s), %zu dumped already",
      dump_id.c_str(), asked, plan.reuse.size());
}

// Symbolising reads debug information of every module: seconds for a large process, so it
// runs here, one dump at a time, never in the training process.
void NodeAgent::SymbolizeLoop() {
  Symbolizer symbolizer;
  for (;;) {
    Dump d;
    {
      MutexLock lock(mu_);
      cv_.Wait(mu_, [this]() XT_REQUIRES(mu_) { return stopping_ || !dumps_.empty(); });
      if (dumps_.empty()) return;
      d = dumps_.front();
      dumps_.pop_front();
      ++symbolizing_;
    }
    HandOn(symbolizer, d);
    MutexLock lock(mu_);
    --symbolizing_;
  }
}

void NodeAgent::HandOn(Symbolizer& symbolizer, const Dump& d) {
  std::string error;
  SymbolizeSummary summary;
  if (!SymbolizeStackFile(d.path, symbolizer, &summary, &error))
    Log(LogLevel::kWarn, "agent: %s (the stack file stays unsymbolised)", error.c_str());
  // The path came from a message: a FIFO, a device or a link is refused before any read.
  std::string text, why;
  if (!ReadRegularFile(d.path, FileRule{.what = "stack file", .max_bytes = kMaxStackFileBytes, .follow_links = false},
                       &text, &why)) {
    Log(LogLevel::kWarn, "agent: rank %d's stack file %s %s; not sent to the collector", d.rank, d.path.c_str(),
        why.c_str());
    return;
  }
  if (link_) link_->Upload(d.rank, d.request_id, text);
}

bool NodeAgent::DumpsSettled(int64_t since_ms) {
  if (last_dump_request_ms_ < since_ms) return false;  // the round has not asked us yet
  {
    MutexLock lock(mu_);
    if (!dumps_.empty() || symbolizing_ > 0) return false;
  }
  return !(link_ && link_->RoundOpen());
}

bool NodeAgent::WaitCheckpointsPersisted(double timeout_s) {
  if (!saver_) return true;
  return saver_->WaitUntilPersisted(timeout_s);
}

void NodeAgent::StartMetrics() {
  if (config_.metrics_port <= 0) return;
  http_ = std::make_unique<GuardedHttpServer>();
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(MetricsText(), PrometheusText::kContentType);
  });
  // Prometheus scrapes each node's exporters from its own host: all interfaces, as node_exporter
  // does (docs/config.md, XTIMER_METRICS_PORT). The server's deadlines keep slow clients from
  // holding it or the agent's exit (common/http_server.h).
  if (!http_->Start("0.0.0.0", config_.metrics_port)) {
    Log(LogLevel::kWarn,
        "agent: cannot serve /metrics on port %d (in use?); set XTIMER_METRICS_PORT to a free port or 0",
        config_.metrics_port);
    http_.reset();
  }
}

std::string NodeAgent::MetricsText() {
  PrometheusText text;
  std::vector<v1::RankReport> reports = registry_.Reports(true);
  AppendRankMetrics(reports, &text);
  {
    MutexLock lock(slow_mu_);
    slowdown::AppendSlowdownMetrics(verdict_, &text);
  }
  text.Family("xtimer_slow_node_evictions_total", "counter",
              "nodes xtimer_run --evict-slow-nodes left out of this run as slow (this one included)");
  text.Add("xtimer_slow_node_evictions_total", {}, evictions_.load());
  text.Family("xtimer_agent_collector_connected", "gauge", "1 when the agent is registered with its collector");
  text.Add("xtimer_agent_collector_connected", {}, link_ && link_->connected() ? 1 : 0);
  return text.Text();
}

void NodeAgent::WatchEvictions(const EvictionThresholds& t) {
  MutexLock lock(slow_mu_);
  watch_evictions_ = true;
  evict_thresholds_ = t;
}

EvictionCall NodeAgent::CheckEviction(int job_nodes) const {
  MutexLock lock(slow_mu_);
  if (!watch_evictions_) return {};
  return JudgeEviction(evict_history_, config_.node_name, job_nodes, evict_thresholds_);
}

void NodeAgent::ReportEviction(const std::string& record, const std::string& reason) {
  v1::NodeEviction eviction;
  std::string error;
  if (!EvictionOfRecord(record, reason, &eviction, &error)) {
    Log(LogLevel::kWarn, "agent: %s; the collector is not told of this node's eviction", error.c_str());
    return;
  }
  if (link_) link_->Eviction(std::move(eviction));
}

void NodeAgent::Tick() {
  CheckDesync();
  if (!link_) return;
  bool changed = registry_.TakeStateChange();
  link_->Report(registry_.Reports(true), changed);
}

void NodeAgent::Stop() {
  if (socket_dir_.empty()) return;
  // The command ended: finish the dumps in hand, then the last words to the collector (the
  // ranks that said goodbye are EXITED).
  {
    MutexLock lock(mu_);
    stopping_ = true;
    cv_.NotifyAll();
  }
  if (symbolize_thread_.joinable()) symbolize_thread_.join();
  FinishSaver();
  if (link_) {
    link_->Report(registry_.Reports(true), true);
    link_->Stop(3000);
  }
  if (http_) http_->Shutdown();
  channel_.Stop();
  std::error_code ec;
  std::filesystem::remove_all(socket_dir_, ec);
  socket_dir_.clear();
}

}  // namespace xtimer
