#include "collector/core_status.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include "common/clock.h"
#include "common/rank_metrics.h"
#include "slowdown/slowdown_metrics.h"
#include "slowdown/slowdown_verdict_json.h"
#include "common/stacks/rank_set.h"

namespace xtimer::collector {
namespace {

const char* StateName(v1::RankState s) {
  switch (s) {
    case v1::RANK_STATE_RUNNING: return "running";
    case v1::RANK_STATE_HUNG: return "hung";
    case v1::RANK_STATE_EXITED: return "exited";
    default: return "unknown";
  }
}

}  // namespace

std::string IsoUtcMs(int64_t unix_ms) {
  return IsoUtc(static_cast<uint64_t>(std::max<int64_t>(unix_ms, 0)) * 1000000ull);
}

void AppendCoreMetrics(const MetricsSnapshot& s, PrometheusText* out) {
  const CoreCounters& c = s.counters;
  AppendRankMetrics(s.reports, out);
  out->Family("xtimer_rank_report_age_seconds", "gauge", "Seconds since the collector last heard from the rank");
  for (size_t i = 0; i < s.reports.size(); ++i)
    out->Add("xtimer_rank_report_age_seconds",
             {{"rank", std::to_string(s.ages[i].first)}, {"host", s.reports[i].rank().host()}}, s.ages[i].second);
  auto gauge = [&](const char* name, const char* help, double v) {
    out->Family(name, "gauge", help);
    out->Add(name, {}, v);
  };
  auto counter = [&](const char* name, const char* help, const Labels& l, double v) {
    out->Family(name, "counter", help);
    out->Add(name, l, v);
  };
  gauge("xtimer_collector_agents_connected", "Agents with an open command stream", static_cast<double>(s.connected));
  gauge("xtimer_collector_sessions", "Agent sessions the collector knows", static_cast<double>(s.sessions));
  gauge("xtimer_collector_ranks_known", "Ranks that have reported", static_cast<double>(s.reports.size()));
  gauge("xtimer_collector_world_size", "The job's world size (as its ranks report it now)", s.world);
  gauge("xtimer_collector_hang_active", "1 while a hang episode is on (some rank reports a hang)",
        s.hang_active ? 1 : 0);
  gauge("xtimer_collector_dump_rounds_active", "Dump rounds waiting for stacks", static_cast<double>(s.active_rounds));
  gauge("xtimer_collector_last_round_ranks_missing", "Ranks without stacks in the last finished dump round",
        s.last_round_missing);
  counter("xtimer_collector_registrations_total", "Agent registrations", {{"result", "accepted"}}, c.registrations);
  counter("xtimer_collector_registrations_total", "", {{"result", "refused"}}, c.registrations_refused);
  counter("xtimer_collector_report_calls_total", "Report calls from agents", {{"result", "ok"}},
          c.report_calls - c.reports_unknown_session);
  counter("xtimer_collector_report_calls_total", "", {{"result", "unknown_session"}}, c.reports_unknown_session);
  counter("xtimer_collector_rank_reports_total", "Rank reports inside Report calls", {{"result", "ok"}},
          c.rank_reports);
  counter("xtimer_collector_rank_reports_total", "", {{"result", "invalid"}}, c.rank_reports_invalid);
  counter("xtimer_collector_uploads_total", "Stack uploads taken", {{"result", "accepted"}}, c.uploads_accepted);
  counter("xtimer_collector_uploads_total", "", {{"result", "duplicate"}}, c.uploads_duplicate);
  out->Family("xtimer_collector_uploads_refused_total", "counter", "Stack uploads refused, by reason");
  for (int i = 0; i < kRefusalCount; ++i)
    out->Add("xtimer_collector_uploads_refused_total", {{"reason", kRefusalNames[i]}},
             static_cast<double>(s.refused[i]));
  counter("xtimer_collector_hang_episodes_total",
          "Hang episodes (from the first rank reporting a hang until none does)", {}, c.hang_episodes);
  counter("xtimer_collector_dump_rounds_total", "Dump rounds started", {}, c.dump_rounds);
  counter("xtimer_collector_dump_rounds_timed_out_total", "Dump rounds finished at the deadline with ranks missing", {},
          c.dump_rounds_timed_out);
  counter("xtimer_collector_dump_commands_total", "DUMP commands sent to agents", {}, c.dump_commands_sent);
  counter("xtimer_collector_dump_commands_held_total",
          "DUMP commands that told the agent to hold its stacks until an UPLOAD (the upload window was full)", {},
          c.dump_commands_held);
  counter("xtimer_collector_upload_commands_total", "UPLOAD commands: an agent holding a round's stacks may send them",
          {}, c.upload_commands_sent);
  counter("xtimer_collector_steps_calls_total", "Steps calls from agents (their ranks' step records)", {},
          c.steps_calls);
  counter("xtimer_collector_step_records_total", "Step records for the slowdown judge", {{"result", "ok"}},
          c.step_records);
  counter("xtimer_collector_step_records_total", "", {{"result", "invalid"}}, c.step_records_invalid);
  counter("xtimer_collector_sample_commands_total",
          "SAMPLE commands: a rank suspected of a host-side slowdown (or a peer) asked for Python samples", {},
          c.sample_commands_sent);
  counter("xtimer_collector_slow_node_evictions_total",
          "Nodes xtimer_run --evict-slow-nodes evicted as slow, as their agents told the collector", {{"result", "ok"}},
          c.node_evictions);
  counter("xtimer_collector_slow_node_evictions_total", "", {{"result", "invalid"}}, c.node_evictions_invalid);
  slowdown::AppendSlowdownMetrics(s.slowdown, out);
}

nlohmann::json RoundsJson(const std::deque<std::shared_ptr<DumpRound>>& rounds, double now) {
  using J = nlohmann::json;
  J rounds_j = J::array();
  for (const auto& r : rounds) {
    const RoundInfo& i = r->info;
    J x = {{"name", i.name},       {"dump_id", i.dump_id},       {"hang_time", IsoUtcMs(i.hang_unix_ms)},
           {"trigger", i.trigger}, {"world_size", i.world_size}, {"finished", i.finished}};
    if (i.finished) {
      x["timed_out"] = i.timed_out;
      x["ranks_reported"] = i.ranks_reported;
      x["ranks_missing"] = i.ranks_missing;
      x["reported_count"] = i.reported_count;
      x["missing_count"] = i.missing_count;
      x["summary"] = i.summary;
      J sus = J::array();
      for (const auto& [rank, reason] : i.suspects) sus.push_back({{"rank", rank}, {"reason", reason}});
      x["suspects"] = std::move(sus);
      x["files"] = i.files;
      if (!i.error.empty()) x["error"] = i.error;
    } else {
      x["received"] = r->Received();
      x["deadline_in_s"] = std::max(0.0, std::round((r->deadline_s - now) * 10) / 10);
    }
    rounds_j.push_back(std::move(x));
  }
  return rounds_j;
}

nlohmann::json StatusJsonOf(const StatusSnapshot& s) {
  using J = nlohmann::json;
  J j;
  j["format"] = "xtimer-collector-status";
  j["version"] = 1;
  j["time"] = s.time;
  j["world_size"] = s.world;
  j["ranks_known"] = s.ranks_known;
  j["agents_connected"] = s.connected;
  j["sessions"] = s.sessions;
  j["hang_active"] = s.hang_active;
  j["dump_wait_s"] = s.dump_wait_s;
  j["rounds"] = s.rounds;
  j["slowdown"] = s.slowdown.updated > 0 ? slowdown::VerdictJson(s.slowdown, false) : J(nullptr);
  std::map<int32_t, const slowdown::RankStatus*> judged;
  for (const slowdown::RankStatus& r : s.slowdown.ranks) judged[r.rank] = &r;
  const CoreCounters& c = s.counters;
  j["counters"] = {{"report_calls", c.report_calls},
                   {"rank_reports", c.rank_reports},
                   {"uploads_accepted", c.uploads_accepted},
                   {"uploads_duplicate", c.uploads_duplicate},
                   {"uploads_refused", c.uploads_refused},
                   {"hang_episodes", c.hang_episodes},
                   {"dump_rounds", c.dump_rounds},
                   {"step_records", c.step_records},
                   {"step_records_invalid", c.step_records_invalid},
                   {"node_evictions", c.node_evictions}};
  J ev = J::array();
  for (const v1::NodeEviction& e : s.evictions)
    ev.push_back({{"node", e.node()},
                  {"name", e.name()},
                  {"round", e.round()},
                  {"group_rank", e.group_rank()},
                  {"cause", e.cause()},
                  {"scope", e.scope()},
                  {"cost", e.cost()},
                  {"since", e.since()},
                  {"named_for_s", e.named_for_s()},
                  {"detail", e.detail()},
                  {"spares", e.spares()},
                  {"time", e.time()},
                  {"reason", e.reason()}});
  j["evictions"] = std::move(ev);

  std::map<std::string, std::vector<int32_t>> by_state;
  J rs = J::array();
  for (const StatusSnapshot::Row& row : s.rows) {
    const v1::RankReport& rep = row.report;
    bool stale = !row.reported || row.age_s > s.stale_after_s;
    std::string state = row.reported ? StateName(rep.state()) : "registered";
    by_state[stale && row.reported && rep.state() != v1::RANK_STATE_EXITED ? "stale" : state].push_back(row.rank);
    J r = {{"rank", row.rank},
           {"host", rep.rank().host()},
           {"local_rank", rep.rank().local_rank()},
           {"pid", rep.rank().pid()},
           {"state", state},
           {"stale", stale}};
    if (row.reported) {
      r["last_report"] = IsoUtcMs(row.wall_ms);
      r["last_report_age_s"] = std::round(row.age_s * 10) / 10;
      r["oldest_inflight_s"] = rep.oldest_inflight_s();
      r["oldest_inflight_op"] = rep.oldest_inflight_op();
      r["trigger"] = rep.trigger();
      r["dumps"] = rep.dumps();
      if (rep.state() == v1::RANK_STATE_EXITED) r["exit_code"] = rep.exit_code();
    }
    if (auto it = judged.find(row.rank); it != judged.end()) {
      r["step_time_s"] = std::round(it->second->step_time_s * 1000) / 1000;
      r["slow_score"] = std::round(it->second->score * 1000) / 1000;
      if (it->second->slow) r["slow_cause"] = slowdown::CauseName(it->second->cause);
    }
    rs.push_back(std::move(r));
  }
  J states = J::object();
  for (auto& [state, list] : by_state) states[state] = {{"count", list.size()}, {"ranks", RankSet(list).Fold(32)}};
  j["states"] = states;
  j["ranks"] = std::move(rs);
  return j;
}

}  // namespace xtimer::collector
