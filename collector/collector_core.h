// The collector core: what xtimer_collector does for a whole job, without sockets. The gRPC
// service (collector_server.h) is a thin adapter over it, and the node agent embeds one for a
// single node (launcher/agent/embedded_collector_link.cc). collector/README.md, "The core", has the
// behaviour in full; in short:
//
//   - agents register (a session each) with a way to reach them (SendCommand), and report ranks;
//   - the first RANK_STATE_HUNG of a hang episode starts a dump round with a new dump_id: the
//     agent that reported it gets a DUMP at once, every other agent with the reply to its next
//     report or at the latest 0.1 s later (on a Tick), so a burst of hang reports gets its DUMPs
//     in the replies instead of a second burst of commands. Only `upload_window` agents upload
//     at a time (the others hold their stacks until an UPLOAD command), so calls do not queue
//     behind a storm of stack files; uploads for it (and the stacks a rank dumped on its own,
//     dump_id "", around that time) are validated, merged as they come and written to
//     out_dir/<hang time>/<rank:05d>-<world:05d>.stacktrace;
//   - when every rank of the world has uploaded, or dump_wait_s has passed, Tick() finishes the
//     round with the viewer's merge (xtimer_merge): folded stacks, flame graphs, call graphs and
//     verdict.json (missing ranks named) in the same folder;
//   - agents' step records (Steps) feed the slowdown judge (slowdown_watch.h), which Tick()
//     evaluates every XTIMER_SLOW_INTERVAL seconds: out_dir/slowdown.json, a log line per
//     slowdown start and end, SAMPLE commands to the agents of suspected host stragglers, and the
//     verdict in /metrics, the status object and each Steps reply.
//
// Guarantees: one dump round per hang episode; each agent asked once per round; a rank's first
// stacks in a round win; every stack file kept is on disk before the round's verdict.json is;
// nothing an agent sends becomes a path or grows memory without bound (collector/README.md,
// "What is refused").
//
// Threads: every method may be called from any thread, concurrently. Callbacks (SendCommand) are
// called without the core's locks held, from the thread that called Report(), Upload(), Tick() or
// Register(); a callback must not block. Tick() runs finished rounds' merges in the calling
// thread; stack files are written by one background thread of the core's own.
//
// Locks (collector_core.cc): one mutex guards the sessions, ranks, hang episode, the list of
// rounds and their pacing; each round's stacks have their own lock, taken after it (uploads of
// many ranks are parsed and merged in parallel, outside the core's mutex); merges are serialized
// by a third, taken before the core's. The parts, one per file: session_registry.h,
// rank_table.h, hang_episode.h, dump_round.h, upload_pacing.h, pending_dumps.h,
// stack_file_writer.h, round_merge.h, core_status.h, status_page.h, slowdown_watch.h (its own
// lock, never taken with the core's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collector.pb.h"
#include "common/env.h"
#include "common/prometheus_text.h"
#include "slowdown/slowdown_judge.h"
#include "slowdown/slowdown_verdict.h"

namespace xtimer::collector {

struct CoreOptions {
  std::string out_dir{};              // dump rounds go to out_dir/<hang time>/
  size_t max_stack_bytes = 16 << 20;  // a larger upload is refused
  // XTIMER_DUMP_WAIT: how long a round waits for stacks (the caller reads the variable).
  double dump_wait_s = env::DefaultDouble("XTIMER_DUMP_WAIT");
  // Which of the viewer's outputs a round writes (viewer/merge_output.h, OutputFormat bits);
  // 0 = all of them (folded, flame graph SVG, DOT + its SVG, speedscope).
  unsigned output_formats = 0;
  // A rank whose last report is older than this no longer counts as hung (its agent is gone).
  double stale_after_s = 60;
  // A session that has no command stream and made no call for this long is forgotten.
  double session_idle_s = 300;
  // How many agents upload a round's stacks at a time (0: all at once, for the node agent's
  // embedded core). An agent leaves the window when every rank it reported has stacks in the
  // round, or after upload_idle_s without an upload from it (it may have nothing to send).
  size_t upload_window = 16;
  double upload_idle_s = 2;
  // Log each agent's registration (off for the node agent's embedded core: one agent, itself).
  bool log_registrations = true;
  // The slowdown judge's settings (the caller reads XTIMER_SLOW_*: JudgeOptions::FromEnv), and
  // whether the core writes out_dir/slowdown.json itself (the node agent writes its own from the
  // verdicts it gets).
  slowdown::JudgeOptions slowdown{};
  bool write_slowdown = true;
  // Test hooks: a monotonic clock and a wall clock. Empty: the real ones.
  std::function<double()> monotonic_s{};
  std::function<int64_t()> wall_ms{};
};

// One finished (or running) dump round, for the page, the tests and the agent.
struct RoundInfo {
  std::string name;  // folder under out_dir, e.g. 20261122T101530Z (also the page's link)
  std::string dir;   // out_dir/name
  std::string dump_id;
  std::string trigger;  // "rank 5: <its trigger>", the report that started it
  int64_t hang_unix_ms = 0;
  int32_t world_size = 0;
  bool finished = false;
  bool timed_out = false;                     // finished at the deadline, not by completeness
  std::string ranks_reported, ranks_missing;  // folded ("0-3/5")
  size_t reported_count = 0, missing_count = 0;
  std::vector<std::string> summary;                       // the verdict's terminal lines
  std::vector<std::pair<int32_t, std::string>> suspects;  // rank, reason
  std::vector<std::string> files;                         // names written into dir (stack files excluded)
  std::string error;                                      // why nothing (or not everything) was written
};

// Totals since the core started (the collector's own /metrics).
struct CoreCounters {
  uint64_t registrations = 0, registrations_refused = 0;
  uint64_t report_calls = 0, rank_reports = 0, reports_unknown_session = 0, rank_reports_invalid = 0;
  uint64_t uploads_accepted = 0, uploads_duplicate = 0, uploads_refused = 0;
  uint64_t hang_episodes = 0, dump_rounds = 0, dump_rounds_timed_out = 0;
  uint64_t dump_commands_sent = 0, dump_commands_held = 0, upload_commands_sent = 0;
  uint64_t steps_calls = 0, step_records = 0, step_records_invalid = 0, sample_commands_sent = 0;
  uint64_t node_evictions = 0, node_evictions_invalid = 0;  // ReportRequest.evictions (a repeat not counted)
};

class CollectorCore {
 public:
  static constexpr size_t kMaxEvictionsKept = 100;
  using SendCommand = std::function<void(const v1::Command&)>;  // reach one agent

  explicit CollectorCore(CoreOptions options);
  ~CollectorCore();
  CollectorCore(const CollectorCore&) = delete;
  CollectorCore& operator=(const CollectorCore&) = delete;

  // A new session for an agent. "" (and *error, one line) when refused: protocol version, or
  // too many sessions. An agent_id that already has a session replaces it (a reconnect).
  std::string Register(const v1::RegisterRequest& request, SendCommand send, std::string* error = nullptr);
  // The session's command stream closed: it gets no more DUMP commands; it is forgotten once
  // idle (options.session_idle_s). Unknown sessions are ignored.
  void Disconnect(const std::string& session);
  bool HasSession(const std::string& session) const;

  // false: unknown session (a restarted collector); the agent registers again. Rank reports
  // that make no sense (rank outside [0, world), world beyond 2^20) are dropped and counted.
  // Node evictions (xtimer_run --evict-slow-nodes) are kept for the page and /status.json (the
  // last kMaxEvictionsKept; strings capped; one without a node name or cause, or with a number
  // that is not finite, is dropped and counted; the same node's eviction from the same round
  // again, an agent's retry, is kept once) and logged, one line each.
  // A dump round that has not asked this agent yet asks it now: *reply_command gets the DUMP
  // when given (the caller sends it with its reply; left untouched otherwise), else it goes
  // through the agent's SendCommand.
  bool Report(const v1::ReportRequest& request, v1::Command* reply_command = nullptr);
  // Validates one rank's stack file (docs/formats.md) and adds it to its dump round; refused
  // (accepted=false, one-line reason, logged) when too large, unparsable, of another
  // format/version, for another rank, for an unknown or finished round, or from an unknown
  // session.
  v1::UploadReply Upload(const v1::StackUpload& upload);
  // An agent's step records for the slowdown judge, as structs: the gRPC service converts a
  // Steps call's records at its edge, the node agent's embedded core passes its own. false:
  // unknown session (register again). Each record is checked here (CheckStepRecord,
  // common/steps/step_record.h): those that break the rules are dropped and counted, the
  // first reason logged (rate-limited). *reply, when given, gets the latest verdict with the
  // session's own ranks only, without its events and samples (left untouched before the first
  // evaluation).
  bool Steps(const std::string& session, std::vector<slowdown::StepRecord> records, slowdown::Verdict* reply = nullptr);
  // The latest slowdown verdict (updated 0 before the first evaluation).
  slowdown::Verdict Slowdown() const;

  // Deadlines: asks the agents a round has not asked yet (0.1 s after it started), finishes
  // dump rounds that are complete or out of time (the merge runs in the calling thread), ends
  // hang episodes, forgets idle sessions. Call about 10 times a second.
  void Tick();
  // Finishes every open round now with what it has (at shutdown).
  void FinishRounds();

  // The whole job in Prometheus text: every rank (common/rank_metrics.h) and the collector's
  // own counters (collector/README.md, "Metrics").
  std::string MetricsText() const;
  void AppendMetrics(PrometheusText* out) const;
  // Ranks with state and last report, counters, rounds (newest first): the page's data.
  std::string StatusJson() const;
  // The page: a self-contained HTML document (no script, no outside resource) over StatusJson.
  // `round_link_prefix` goes before "<round>/<file>" in links to the rounds' files.
  std::string StatusPageHtml(std::string_view round_link_prefix = "rounds/") const;

  // Rounds, newest first (the last 50 are kept).
  std::vector<RoundInfo> Rounds() const;
  // The path of `file` of round `name` if this core wrote it (a merge output of a finished
  // round); nullopt otherwise. The HTTP front end serves nothing else.
  std::optional<std::string> RoundFile(std::string_view name, std::string_view file) const;
  CoreCounters Counters() const;
  size_t SessionsConnected() const;  // sessions with an open command stream (or embedded)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xtimer::collector
