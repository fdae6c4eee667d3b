#include "launcher/agent/rank_registry.h"

#include "common/clock.h"
#include "common/log.h"

namespace xtimer {

std::vector<v1::OpStat> OpStatsOfSummary(const nlohmann::json& summary) {
  std::vector<v1::OpStat> out;
  if (!summary.is_object() || !summary.contains("ops") || !summary["ops"].is_array()) return out;
  for (const auto& o : summary["ops"]) {
    if (!o.is_object()) continue;
    v1::OpStat s;
    s.set_name(o.value("name", ""));
    s.set_kind(o.value("kind", ""));
    s.set_count(o.value("count", 0ull));
    s.set_mean_us(o.value("mean_us", 0.0));
    s.set_p50_us(o.value("p50_us", 0.0));
    s.set_p99_us(o.value("p99_us", 0.0));
    s.set_max_us(o.value("max_us", 0.0));
    s.set_total_ms(o.value("total_ms", 0.0));
    s.set_tflops(o.value("tflops", 0.0));
    s.set_algbw_gbps(o.value("algbw_gbps", 0.0));
    s.set_busbw_gbps(o.value("busbw_gbps", 0.0));
    s.set_comm(o.value("comm", ""));
    s.set_bytes(o.value("bytes", 0ull));
    if (o.contains("m"))
      s.set_shape(std::to_string(o.value("m", 0)) + "x" + std::to_string(o.value("n", 0)) + "x" +
                  std::to_string(o.value("k", 0)));
    out.push_back(std::move(s));
  }
  return out;
}

RankRegistry::Entry* RankRegistry::Find(int conn) {
  for (auto& [pid, e] : ranks_)
    if (e.conn == conn) return &e;
  return nullptr;
}

pid_t RankRegistry::OnMessage(int conn, const nlohmann::json& msg, std::string* request_id) {
  const std::string type = msg.value("type", "");
  if (type == "steps") return -1;
  MutexLock lock(mu_);
  pid_t pid = msg.value("pid", -1);
  Entry* e = nullptr;
  if (pid > 0) {
    e = &ranks_[pid];
    e->conn = conn;
  } else {
    e = Find(conn);
  }
  if (e == nullptr) return -1;
  v1::RankReport& r = e->report;
  if (msg.contains("rank")) {
    v1::Rank* who = r.mutable_rank();
    who->set_rank(msg.value("rank", 0));
    who->set_world_size(msg.value("world_size", 1));
    who->set_local_rank(msg.value("local_rank", -1));
    who->set_host(msg.value("host", ""));
    who->set_pid(pid);
  }
  r.set_time_unix_ms(WallMs());
  if (r.state() == v1::RANK_STATE_UNKNOWN) r.set_state(v1::RANK_STATE_RUNNING);
  if (type == "hello") {
    Log(LogLevel::kDebug, "agent: rank %d (pid %d) said hello", r.rank().rank(), static_cast<int>(pid));
    e->has_link = msg.value("link", true);
    e->dump_signal = e->has_link ? 0 : msg.value("dump_signal", 0);
  }
  if (type == "status") {
    e->has_link = true;  // only a link thread reports its state
    auto state = msg.value("state", "running") == "hung" ? v1::RANK_STATE_HUNG : v1::RANK_STATE_RUNNING;
    if (state != r.state()) changed_ = true;
    r.set_state(state);
    r.set_trigger(msg.value("trigger", ""));
    r.set_oldest_inflight_s(msg.value("oldest_inflight_s", 0.0));
    r.set_oldest_inflight_op(msg.value("oldest_inflight_op", ""));
    r.set_dumps(msg.value("dumps", 0ull));
  } else if (type == "dump_written") {
    std::string answers = msg.value("request_id", "");
    if (answers.empty() && !e->signalled_request.empty()) {
      answers.swap(e->signalled_request);
    } else if (answers.empty()) {
      e->own_dump_ms = WallMs();
      e->own_dump_path = msg.value("path", "");
    }
    if (request_id != nullptr) *request_id = answers;
  } else if (type == "summary") {
    r.clear_ops();
    for (auto& op : OpStatsOfSummary(msg.value("summary", nlohmann::json::object()))) *r.add_ops() = std::move(op);
  }
  return pid;
}

void RankRegistry::OnClose(int conn) {
  MutexLock lock(mu_);
  if (Entry* e = Find(conn)) {
    e->conn = -1;
    e->report.set_state(v1::RANK_STATE_EXITED);
    e->report.set_time_unix_ms(WallMs());
    changed_ = true;
  }
}

std::vector<v1::RankReport> RankRegistry::Reports(bool with_ops) const {
  MutexLock lock(mu_);
  std::vector<v1::RankReport> out;
  for (const auto& [pid, e] : ranks_) {
    out.push_back(e.report);
    if (!with_ops) out.back().clear_ops();
  }
  return out;
}

std::vector<int> RankRegistry::LiveConnections() const {
  MutexLock lock(mu_);
  std::vector<int> out;
  for (const auto& [pid, e] : ranks_)
    if (e.conn >= 0) out.push_back(e.conn);
  return out;
}

int RankRegistry::ConnectionOfRank(int rank) const {
  MutexLock lock(mu_);
  for (const auto& [pid, e] : ranks_)
    if (e.conn >= 0 && e.has_link && e.report.has_rank() && e.report.rank().rank() == rank) return e.conn;
  return -1;
}

RankRegistry::DumpPlan RankRegistry::PlanDump(double recent_s) const {
  MutexLock lock(mu_);
  const int64_t since = WallMs() - static_cast<int64_t>(recent_s * 1000);
  DumpPlan plan;
  for (const auto& [pid, e] : ranks_) {
    if (e.conn < 0) continue;
    if (e.own_dump_ms >= since && !e.own_dump_path.empty()) {
      plan.reuse.emplace_back(e.report.rank().rank(), e.own_dump_path);
    } else if (!e.has_link) {
      if (e.dump_signal > 0) plan.signal.emplace_back(pid, e.dump_signal);
    } else {
      plan.ask.push_back(e.conn);
    }
  }
  return plan;
}

void RankRegistry::NoteSignalled(pid_t pid, const std::string& request_id) {
  MutexLock lock(mu_);
  auto it = ranks_.find(pid);
  if (it != ranks_.end()) it->second.signalled_request = request_id;
}

bool RankRegistry::TakeStateChange() {
  MutexLock lock(mu_);
  bool c = changed_;
  changed_ = false;
  return c;
}

bool RankRegistry::FindHung(int* rank, std::string* trigger) const {
  MutexLock lock(mu_);
  for (const auto& [pid, e] : ranks_) {
    if (e.report.state() != v1::RANK_STATE_HUNG) continue;
    *rank = e.report.rank().rank();
    *trigger = e.report.trigger();
    return true;
  }
  return false;
}

void RankRegistry::ForgetExited() {
  MutexLock lock(mu_);
  std::erase_if(ranks_, [](const auto& kv) { return kv.second.report.state() == v1::RANK_STATE_EXITED; });
  changed_ = true;
}

}  // namespace xtimer
