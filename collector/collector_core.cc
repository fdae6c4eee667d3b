// The core's calls: each takes the core's mutex, updates the parts it owns (sessions, ranks, the
// hang episode, the rounds and their pacing, pending own dumps), and sends the commands it decided
// on after releasing it. The parts are in their own files; this one says what happens when.
#include "collector/collector_core.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "collector/agent_strings.h"
#include "collector/core_status.h"
#include "collector/collector_desync.h"
#include "collector/dump_round.h"
#include "collector/hang_episode.h"
#include "collector/log_limiter.h"
#include "collector/pending_dumps.h"
#include "collector/rank_table.h"
#include "collector/round_merge.h"
#include "collector/session_registry.h"
#include "collector/slowdown_watch.h"
#include "collector/stack_file_writer.h"
#include "collector/status_page.h"
#include "collector/upload_refusal.h"
#include "common/atomic_file.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/stacks/stack_file.h"
#include "common/stacks/stack_reader.h"

namespace xtimer::collector {
namespace {

constexpr size_t kMaxRoundsKept = 50;
constexpr size_t kMaxFinishedIds = 1000;

v1::Command MakeCommand(v1::Command::Kind kind, const std::string& dump_id, bool wait = false) {
  v1::Command c;
  c.set_kind(kind);
  c.set_dump_id(dump_id);
  c.set_wait_for_upload(wait);
  return c;
}

}  // namespace

struct CollectorCore::Impl {
  explicit Impl(CoreOptions o) : opt(std::move(o)), slow(opt.slowdown, opt.out_dir, opt.write_slowdown, /*log=*/true) {
    if (!opt.monotonic_s) opt.monotonic_s = MonotonicS;
    if (!opt.wall_ms) opt.wall_ms = WallMs;
    if (!(opt.dump_wait_s >= 0)) opt.dump_wait_s = env::DefaultDouble("XTIMER_DUMP_WAIT");
    std::random_device rd;
    rng.seed((uint64_t{rd()} << 32) ^ rd());
    std::string error;
    if (!opt.out_dir.empty() && !MakeDirs(opt.out_dir, &error))
      Log(LogLevel::kError, "collector: cannot create the output folder %s: %s (dump rounds will not be written)",
          opt.out_dir.c_str(), error.c_str());
  }

  struct Outgoing {  // a command for one agent, sent once the core's locks are released
    SendCommand send;
    v1::Command command;
  };

  CoreOptions opt;  // set by the constructor, then read-only

  // Lock order: mu, then a round's own lock (DumpRound), then the writer's. finish_mu is taken
  // before mu (a merge takes mu for short moments) and never under it. A DumpRound's bookkeeping
  // (info, files, pacing) is under mu too: a rule in words, the analysis cannot name it there.
  mutable Mutex mu;
  std::mt19937_64 rng XT_GUARDED_BY(mu);
  SessionRegistry sessions XT_GUARDED_BY(mu);
  RankTable ranks XT_GUARDED_BY(mu);
  HangEpisode episode XT_GUARDED_BY(mu);
  double next_housekeeping_s XT_GUARDED_BY(mu) = 0;                  // episode end, idle sessions, old own dumps
  std::vector<std::shared_ptr<DumpRound>> active XT_GUARDED_BY(mu);  // open rounds, oldest first
  // The last kMaxRoundsKept, newest first, open and finished.
  std::deque<std::shared_ptr<DumpRound>> rounds XT_GUARDED_BY(mu);
  std::deque<std::string> finished_ids XT_GUARDED_BY(mu);  // dump_ids of closed rounds (the last kMaxFinishedIds)
  std::set<std::string> used_names XT_GUARDED_BY(mu);      // folder names of `rounds`
  PendingDumps pending XT_GUARDED_BY(mu);
  CoreCounters counters XT_GUARDED_BY(mu);  // the upload counters are the atomics below
  int32_t last_round_missing XT_GUARDED_BY(mu) = 0;
  std::deque<v1::NodeEviction> evictions XT_GUARDED_BY(mu);  // newest first, the last kMaxEvictionsKept

  // Counted without mu: uploads are checked, parsed and added outside it.
  std::atomic<uint64_t> uploads_accepted{0}, uploads_duplicate{0}, uploads_refused{0};
  std::atomic<uint64_t> refusals[kRefusalCount] = {};

  Mutex finish_mu XT_ACQUIRED_BEFORE(mu);  // one merge at a time
  StackFileWriter writer;
  LogLimiter refusal_log, report_log, steps_log;
  SlowdownWatch slow;               // its own locks; never taken under mu
  DesyncWatch desync{opt.out_dir};  // its own lock; never taken under mu
  std::atomic<uint64_t> steps_calls{0}, sample_commands{0};

  double Now() const { return opt.monotonic_s(); }

  CoreCounters CountersLocked() const XT_REQUIRES(mu) {
    CoreCounters c = counters;
    c.steps_calls = steps_calls;
    c.step_records = slow.accepted();
    c.step_records_invalid = slow.refused();
    c.sample_commands_sent = sample_commands;
    c.uploads_accepted = uploads_accepted;
    c.uploads_duplicate = uploads_duplicate;
    c.uploads_refused = uploads_refused;
    return c;
  }

  std::string NewId(size_t hex_digits) XT_REQUIRES(mu) {
    static const char* kHex = "0123456789abcdef";
    std::string s;
    uint64_t v = 0;
    for (size_t i = 0; i < hex_digits; ++i) {
      if (i % 16 == 0) v = rng();
      s += kHex[v & 15];
      v >>= 4;
    }
    return s;
  }

  static void SendAll(const std::vector<Outgoing>& out) {
    for (const Outgoing& o : out) o.send(o.command);
  }

  // Before a rank's entry is touched. The job's world size is the one its ranks report
  // now: after an elastic restart with another world size, what the old world's ranks said is
  // forgotten, so no dump round waits for a rank that no longer exists or names it missing.
  void AdoptWorldLocked(int32_t w) XT_REQUIRES(mu) {
    if (ranks.AdoptWorld(w)) sessions.DropRanksFrom(w);
  }

  // ---- sessions and reports ----

  std::string Register(const v1::RegisterRequest& req, SendCommand send, std::string* error) XT_EXCLUDES(mu) {
    std::string why;
    std::vector<Outgoing> out;
    std::string session;
    {
      MutexLock lock(mu);
      if (req.protocol_version() != 1) {
        why = "protocol version " + std::to_string(req.protocol_version()) +
              " is not supported (this collector speaks 1)";
      } else if (sessions.Full(req.agent_id())) {
        why = "too many agents (" + std::to_string(SessionRegistry::kMaxSessions) + " sessions); try again later";
      }
      if (!why.empty()) {
        ++counters.registrations_refused;
      } else {
        ++counters.registrations;
        session = NewId(32);
        AgentSession& s = sessions.Add(session, req, std::move(send), Now());
        for (const v1::Rank& r : req.ranks()) {
          if (!RankTable::Valid(r)) continue;
          AdoptWorldLocked(r.world_size());
          s.ranks.insert(r.rank());
          ranks.Register(r);
        }
        // An agent that comes (back) during a dump round is asked too.
        if (!active.empty())
          if (std::optional<Outgoing> dump = AskToDump(*active.back(), session)) out.push_back(std::move(*dump));
      }
    }
    if (!why.empty()) {
      Log(LogLevel::kWarn, "collector: refused to register agent %s of node %s: %s", Printable(req.agent_id()).c_str(),
          Printable(req.node()).c_str(), why.c_str());
      if (error) *error = why;
      return "";
    }
    Log(opt.log_registrations ? LogLevel::kInfo : LogLevel::kDebug,
        "collector: agent %s of node %s registered with %d ranks", Printable(req.agent_id()).c_str(),
        Printable(req.node()).c_str(), req.ranks_size());
    SendAll(out);
    return session;
  }

  bool Report(const v1::ReportRequest& req, v1::Command* reply_command) XT_EXCLUDES(mu) {
    const double now = Now();
    const int64_t wall = opt.wall_ms();
    std::vector<Outgoing> out;
    uint64_t invalid = 0;
    std::vector<v1::NodeEviction> evicted;  // new ones, logged after the lock
    std::string bad_evictions;              // why the first invalid one was dropped
    {
      MutexLock lock(mu);
      ++counters.report_calls;
      AgentSession* session = sessions.Find(req.session());
      if (session == nullptr) {
        ++counters.reports_unknown_session;
        return false;
      }
      session->last_seen_s = now;
      const v1::RankReport* hang = nullptr;
      for (const v1::RankReport& r : req.reports()) {
        if (!RankTable::Valid(r.rank())) {
          ++invalid;
          continue;
        }
        ++counters.rank_reports;
        AdoptWorldLocked(r.rank().world_size());
        session->ranks.insert(r.rank().rank());
        if (ranks.Update(r, now, wall) && hang == nullptr) hang = &r;
      }
      counters.rank_reports_invalid += invalid;
      for (const v1::NodeEviction& e : req.evictions()) AddEvictionLocked(e, wall, &evicted, &bad_evictions);
      if (hang != nullptr && episode.OnNewHang()) {
        ++counters.hang_episodes;
        StartRound(*hang, now, wall);
      }
      // Open rounds that have not asked this agent yet ask it now: in the reply when the caller
      // takes one (the first such round), else through its command stream.
      for (auto& round : active) {
        std::optional<Outgoing> dump = AskToDump(*round, req.session());
        if (!dump) continue;
        if (reply_command != nullptr && reply_command->kind() == v1::Command::KIND_UNSPECIFIED)
          *reply_command = std::move(dump->command);
        else out.push_back(std::move(*dump));
      }
    }
    if (invalid > 0) {
      uint64_t suppressed = 0;
      if (report_log.Allow(now, &suppressed))
        Log(LogLevel::kWarn,
            "collector: dropped %llu rank reports of session %.8s... (rank outside [0, world_size) or "
            "world_size outside [1, 2^20])",
            (unsigned long long)invalid, req.session().c_str());
    }
    for (const v1::NodeEviction& e : evicted)
      Log(LogLevel::kWarn, "collector: node %s (%s) was evicted as slow from round %lld: %s",
          Printable(e.name()).c_str(), Printable(e.node()).c_str(), static_cast<long long>(e.round()),
          Printable(e.reason(), 600).c_str());
    if (!bad_evictions.empty()) {
      uint64_t suppressed = 0;
      if (report_log.Allow(now, &suppressed))
        Log(LogLevel::kWarn, "collector: dropped a node eviction of session %.8s...: %s", req.session().c_str(),
            bad_evictions.c_str());
    }
    SendAll(out);
    uint64_t dropped_before = 0;
    if (desync.Add(req.prints(), static_cast<int64_t>(now * 1000)) > 0 && report_log.Allow(now, &dropped_before))
      Log(LogLevel::kWarn, "collector: dropped collective fingerprints of session %.8s... that break the rules",
          req.session().c_str());
    return true;
  }

  // One node eviction of a Report: checked, capped, kept once (node name and round), counted.
  void AddEvictionLocked(const v1::NodeEviction& in, int64_t wall, std::vector<v1::NodeEviction>* added,
                         std::string* why) XT_REQUIRES(mu) {
    std::string problem;
    if (in.name().empty()) problem = "no node name";
    else if (in.cause().empty()) problem = "no cause";
    else if (in.round() < 0) problem = "a negative round";
    for (double v : {in.cost(), in.since(), in.named_for_s(), in.time()})
      if (problem.empty() && !std::isfinite(v)) problem = "a number that is not finite";
    if (!problem.empty()) {
      ++counters.node_evictions_invalid;
      if (why->empty()) *why = "it has " + problem;
      return;
    }
    for (const v1::NodeEviction& e : evictions)
      if (e.name() == in.name().substr(0, 256) && e.round() == in.round()) return;  // sent again
    v1::NodeEviction e = in;
    Truncate(e.mutable_node(), 256);
    Truncate(e.mutable_name(), 256);
    Truncate(e.mutable_cause(), 32);
    Truncate(e.mutable_scope(), 32);
    Truncate(e.mutable_detail(), 1024);
    Truncate(e.mutable_reason(), 2048);
    if (e.time() <= 0) e.set_time(static_cast<double>(wall) / 1000);
    ++counters.node_evictions;
    evictions.push_front(e);
    while (evictions.size() > kMaxEvictionsKept) evictions.pop_back();
    added->push_back(std::move(e));
  }

  // Ranks out of step across nodes (collector_desync.h): each verdict goes to every agent
  // (OUT_OF_STEP: one with XTIMER_DESYNC_ACTION=abort stops its workers) and asks every rank for
  // its stacks as a hang does, unless a dump round is open already.
  void TickDesync() XT_EXCLUDES(mu) {
    std::vector<desync::Mismatch> found = desync.Tick(static_cast<int64_t>(Now() * 1000), opt.wall_ms());
    if (found.empty() || found.front().suspects.empty()) return;
    std::vector<Outgoing> out;
    {
      MutexLock lock(mu);
      for (const auto& [id, session] : sessions.all()) {
        if (!session.send) continue;
        v1::Command command;
        command.set_kind(v1::Command::OUT_OF_STEP);
        command.set_rank(found.front().suspects.front());
        command.set_reason(found.front().Line());
        command.set_comm(found.front().comm);
        out.push_back(Outgoing{session.send, std::move(command)});
      }
    }
    SendAll(out);
    MutexLock lock(mu);
    if (!active.empty()) return;
    v1::RankReport why;
    why.mutable_rank()->set_rank(found.front().suspects.front());
    why.set_trigger("out of step: " + found.front().Line());
    why.set_time_unix_ms(opt.wall_ms());
    StartRound(why, Now(), opt.wall_ms());
  }

  // ---- slowdowns ----

  bool Steps(const std::string& session_id, std::vector<slowdown::StepRecord> records, slowdown::Verdict* reply) {
    const double now = Now();
    ++steps_calls;
    {
      MutexLock lock(mu);
      AgentSession* session = sessions.Find(session_id);
      if (session == nullptr) return false;
      session->last_seen_s = now;
    }
    std::string why;
    size_t bad = slow.Add(session_id, std::move(records), static_cast<double>(opt.wall_ms()) / 1000, &why);
    uint64_t suppressed = 0;
    if (bad > 0 && steps_log.Allow(now, &suppressed))
      Log(LogLevel::kWarn, "collector: dropped %zu step records of session %.8s...: %s", bad, session_id.c_str(),
          Printable(why, 200).c_str());
    if (reply != nullptr) slow.LatestFor(session_id, reply);
    return true;
  }

  // The judge's evaluation, when one is due; its SAMPLE commands go to the ranks' agents.
  void TickSlowdown() {
    std::vector<SlowdownWatch::Sample> samples = slow.Tick(static_cast<double>(opt.wall_ms()) / 1000);
    if (samples.empty()) return;
    std::vector<Outgoing> out;
    {
      MutexLock lock(mu);
      for (SlowdownWatch::Sample& s : samples) {
        const AgentSession* session = sessions.Find(s.session);
        if (session == nullptr || !session->send) continue;
        v1::Command command;
        command.set_kind(v1::Command::SAMPLE);
        command.set_rank(s.request.rank);
        command.set_seconds(s.request.seconds);
        command.set_hz(s.request.hz);
        out.push_back(Outgoing{session->send, std::move(command)});
      }
    }
    sample_commands += out.size();
    SendAll(out);
  }

  // ---- dump rounds ----

  // Makes the round and its folder. The agents are asked by Report and Tick.
  void StartRound(const v1::RankReport& hang, double now, int64_t wall) XT_REQUIRES(mu) {
    const int32_t world = ranks.world();
    auto round = std::make_shared<DumpRound>(world, opt.upload_window, opt.upload_idle_s);
    round->dump_id = NewId(16);
    round->started_s = now;
    round->deadline_s = now + opt.dump_wait_s;
    // The hang time: the report's own clock when it is sane, else ours.
    int64_t hang_ms = hang.time_unix_ms();
    if (hang_ms <= 0 || std::llabs(hang_ms - wall) > 86400000) hang_ms = wall;
    CreateRoundFolder(opt.out_dir, hang_ms, used_names, round.get());
    used_names.insert(round->name);
    RoundInfo& info = round->info;
    info.name = round->name;
    info.dir = round->dir;
    info.dump_id = round->dump_id;
    info.hang_unix_ms = hang_ms;
    info.world_size = world;
    info.trigger = "rank " + std::to_string(hang.rank().rank()) + (hang.trigger().empty() ? "" : ": " + hang.trigger());
    Truncate(&info.trigger, 300);
    if (!round->dir_ok && info.error.empty() && !opt.out_dir.empty())
      info.error = "the round's folder could not be created";
    active.push_back(round);
    rounds.push_front(round);
    while (rounds.size() > kMaxRoundsKept) {
      used_names.erase(rounds.back()->name);
      rounds.pop_back();
    }
    ++counters.dump_rounds;
    Log(LogLevel::kWarn,
        "collector: rank %d reports a hang (%s); dump round %s asks %zu agents for every rank's "
        "stacks (waiting up to %g s), output %s",
        hang.rank().rank(), Printable(hang.trigger(), 200).c_str(), round->dump_id.c_str(), sessions.Reachables(),
        opt.dump_wait_s, round->dir.empty() ? "(none)" : round->dir.c_str());
  }

  // The round's DUMP for one session, unless it was asked already or cannot be
  // reached: upload at once while the window has room, else hold.
  std::optional<Outgoing> AskToDump(DumpRound& round, const std::string& session) XT_REQUIRES(mu) {
    const AgentSession* s = sessions.Find(session);
    if (s == nullptr || !s->connected || !s->send) return std::nullopt;
    bool upload_now = true;
    if (!round.pacing.Ask(session, Now(), &upload_now)) return std::nullopt;
    ++counters.dump_commands_sent;
    counters.dump_commands_held += !upload_now;
    return Outgoing{s->send, MakeCommand(v1::Command::DUMP, round.dump_id, !upload_now)};
  }

  // Every connected session the round has not asked yet, once kDumpFanoutDelayS passed.
  void FanOut(DumpRound& round, double now, std::vector<Outgoing>* out) XT_REQUIRES(mu) {
    if (!round.pacing.FanOutDue(round.started_s, now)) return;
    for (const auto& [id, s] : sessions.all())
      if (std::optional<Outgoing> dump = AskToDump(round, id)) out->push_back(std::move(*dump));
  }

  // Takes the round's lock: every rank the session is known to have has stacks in it.
  bool SessionDone(const DumpRound& round, const std::string& session) const XT_REQUIRES(mu) {
    const AgentSession* s = sessions.Find(session);
    return s == nullptr || round.HasAll(s->ranks);
  }

  // Lets waiting sessions upload while the window has room.
  void GrantNext(DumpRound& round, double now, std::vector<Outgoing>* out) XT_REQUIRES(mu) {
    for (const std::string& id :
         round.pacing.GrantNext(now, [&](const std::string& s) XT_REQUIRES(mu) { return sessions.Reachable(s); })) {
      out->push_back(Outgoing{sessions.Find(id)->send, MakeCommand(v1::Command::UPLOAD, round.dump_id)});
      ++counters.upload_commands_sent;
    }
  }

  // After an upload of `session` for `round`: a session whose ranks are all in leaves the window.
  void PaceAfterUpload(DumpRound& round, const std::string& session) XT_EXCLUDES(mu) {
    if (!round.pacing.paced()) return;
    std::vector<Outgoing> out;
    {
      MutexLock lock(mu);
      const double now = Now();
      if (!round.pacing.Uploaded(session, now)) return;
      if (!SessionDone(round, session)) return;
      round.pacing.Leave(session);
      GrantNext(round, now, &out);
    }
    SendAll(out);
  }

  // Sessions that finished, went away or stay silent leave the window.
  void PaceOnTick(DumpRound& round, double now, std::vector<Outgoing>* out) XT_REQUIRES(mu) {
    round.pacing.Expire(
        now,
        [&](const std::string& id) XT_REQUIRES(mu) {
          const AgentSession* s = sessions.Find(id);
          return s == nullptr || !s->connected;
        },
        [&](const std::string& id) XT_REQUIRES(mu) { return SessionDone(round, id); });
    GrantNext(round, now, out);
  }

  // ---- uploads ----

  void LogRefusal(const std::string& what) {
    uint64_t suppressed = 0;
    bool allow = refusal_log.Allow(Now(), &suppressed);
    if (suppressed > 0)
      Log(LogLevel::kWarn, "collector: %llu more refused uploads were not logged", (unsigned long long)suppressed);
    if (allow) Log(LogLevel::kWarn, "collector: refused %s", what.c_str());
  }

  v1::UploadReply Refuse(Refusal why, const std::string& source, std::string reason) {
    ++uploads_refused;
    ++refusals[static_cast<int>(why)];
    LogRefusal(source + ": " + reason);
    v1::UploadReply r;
    r.set_accepted(false);
    r.set_reason(std::move(reason));
    return r;
  }

  v1::UploadReply Duplicate(const DumpRound& round, int32_t rank) {
    ++uploads_duplicate;
    v1::UploadReply r;
    r.set_accepted(true);
    r.set_reason("dump round " + round.dump_id + " already has rank " + std::to_string(rank) +
                 "'s stacks; kept the first");
    return r;
  }

  v1::UploadReply Upload(const v1::StackUpload& u) {
    std::shared_ptr<DumpRound> round;
    v1::UploadReply reply = Accept(u, &round);
    if (round) PaceAfterUpload(*round, u.session());
    return reply;
  }

  // *round_out: the round the upload was for, if it is open.
  v1::UploadReply Accept(const v1::StackUpload& u, std::shared_ptr<DumpRound>* round_out) XT_EXCLUDES(mu) {
    const double now = Now();
    const int32_t rank = u.rank();
    std::shared_ptr<DumpRound>& round = *round_out;
    std::string source;
    {
      MutexLock lock(mu);
      AgentSession* session = sessions.Find(u.session());
      if (session == nullptr) {
        lock.Unlock();
        return Refuse(Refusal::kUnknownSession, "an upload (rank " + std::to_string(rank) + ")",
                      "unknown session (the collector restarted?): register again");
      }
      session->last_seen_s = now;
      source = "node " + Printable(session->node) + " rank " + std::to_string(rank) + " upload";
      if (!u.dump_id().empty()) {
        for (auto& r : active)
          if (r->dump_id == u.dump_id()) round = r;
        if (!round) {
          // A round merged a moment ago: stacks it already has are a duplicate, not an error.
          for (auto& r : rounds)
            if (r->dump_id == u.dump_id() && r->Has(rank)) {
              lock.Unlock();
              ++uploads_duplicate;
              v1::UploadReply reply;
              reply.set_accepted(true);
              reply.set_reason("dump round " + r->dump_id + " is merged and has rank " + std::to_string(rank) +
                               "'s stacks");
              return reply;
            }
          bool finished = std::find(finished_ids.begin(), finished_ids.end(), u.dump_id()) != finished_ids.end();
          lock.Unlock();
          return Refuse(Refusal::kUnknownRound, source,
                        finished ? "dump round " + Printable(u.dump_id()) + " is already merged"
                                 : "unknown dump round " + Printable(u.dump_id()));
        }
      } else if (!active.empty()) {
        round = active.back();
      }
    }
    if (rank < 0 || rank >= kMaxStackWorldSize)
      return Refuse(Refusal::kBadRank, source, "rank " + std::to_string(rank) + " is outside [0, 2^20)");
    if (u.stack_json().size() > opt.max_stack_bytes)
      return Refuse(Refusal::kTooLarge, source,
                    "stack file of " + std::to_string(u.stack_json().size()) + " bytes is larger than the limit of " +
                        std::to_string(opt.max_stack_bytes));
    if (round && round->Has(rank)) return Duplicate(*round, rank);
    // Parse outside every lock: uploads of many ranks are read in parallel.
    thread_local StackFile file;
    std::string error;
    if (!ParseStackFile(u.stack_json(), &file, &error)) {
      if (round) round->Skip(source, error);
      return Refuse(Refusal::kParse, source, "not a usable stack file: " + error);
    }
    if (file.rank != rank)
      return Refuse(
          Refusal::kRankMismatch, source,
          "the stack file is rank " + std::to_string(file.rank) + "'s, the upload says rank " + std::to_string(rank));
    if (!round) return KeepPending(rank, u.stack_json(), source, now);
    return AddToRound(round, file, u.stack_json(), source);
  }

  // `count`: false for dumps taken in from `pending` (counted when they came).
  v1::UploadReply AddToRound(const std::shared_ptr<DumpRound>& round, const StackFile& file, const std::string& bytes,
                             const std::string& source, bool count = true) {
    std::string path, error;
    switch (round->Add(file, source, &path, &error)) {
      case DumpRound::AddResult::kClosed:
        return Refuse(Refusal::kRoundClosed, source,
                      "dump round " + round->dump_id + " was merged before these stacks arrived");
      case DumpRound::AddResult::kDuplicate: return Duplicate(*round, file.rank);
      case DumpRound::AddResult::kWorldMismatch: return Refuse(Refusal::kWorldMismatch, source, error);
      case DumpRound::AddResult::kMergeFailed: return Refuse(Refusal::kMerge, source, error);
      case DumpRound::AddResult::kAdded: break;
    }
    if (count) ++uploads_accepted;
    if (!path.empty()) writer.Write(std::move(path), bytes, round->writes);
    v1::UploadReply r;
    r.set_accepted(true);
    return r;
  }

  v1::UploadReply KeepPending(int32_t rank, const std::string& bytes, const std::string& source, double now)
      XT_EXCLUDES(mu) {
    {
      MutexLock lock(mu);
      pending.Keep(rank, bytes, source, now);
    }
    ++uploads_accepted;
    v1::UploadReply r;
    r.set_accepted(true);
    r.set_reason("no dump round open: kept for one starting within " +
                 std::to_string(static_cast<int>(opt.dump_wait_s)) + " s");
    return r;
  }

  // The dumps ranks took on their own shortly before the round started join it.
  void ImportPending(const std::shared_ptr<DumpRound>& round) XT_EXCLUDES(mu) {
    std::vector<std::pair<int32_t, PendingDump>> take;
    {
      MutexLock lock(mu);
      take = pending.TakeSince(round->started_s - opt.dump_wait_s);
    }
    StackFile file;
    std::string error;
    for (auto& [rank, p] : take) {
      if (round->Has(rank)) continue;
      if (!ParseStackFile(p.bytes, &file, &error)) continue;  // checked when it came; cannot fail
      AddToRound(round, file, p.bytes, p.source, /*count=*/false);
    }
  }

  // ---- deadlines ----

  void Tick(bool finish_all) XT_EXCLUDES(mu) {
    const double now = Now();
    std::vector<std::shared_ptr<DumpRound>> import, finish;
    std::vector<Outgoing> out;
    {
      MutexLock lock(mu);
      for (auto& r : active)
        if (r->needs_import.exchange(false)) import.push_back(r);
    }
    for (auto& r : import) ImportPending(r);
    {
      MutexLock lock(mu);
      for (auto it = active.begin(); it != active.end();) {
        if (finish_all || (*it)->complete || now >= (*it)->deadline_s) {
          finish.push_back(*it);
          finished_ids.push_back((*it)->dump_id);
          if (finished_ids.size() > kMaxFinishedIds) finished_ids.pop_front();
          it = active.erase(it);
        } else {
          FanOut(**it, now, &out);
          PaceOnTick(**it, now, &out);
          ++it;
        }
      }
      if (now >= next_housekeeping_s) {
        next_housekeeping_s = now + 1;
        if (episode.EndIfNoneHung(ranks, now, opt.stale_after_s))
          Log(LogLevel::kInfo, "collector: no rank reports a hang any more; the next hang starts a new dump round");
        sessions.ForgetIdle(now, opt.session_idle_s);
        pending.Expire(now, std::max(opt.dump_wait_s, 1.0));
      }
    }
    SendAll(out);
    for (auto& r : finish) FinishRound(r, now);
    TickSlowdown();
    TickDesync();
  }

  // Closes the round, merges it (round_merge.h) in this thread and records the result.
  void FinishRound(const std::shared_ptr<DumpRound>& round, double now) XT_EXCLUDES(mu, finish_mu) {
    MutexLock serial(finish_mu);
    DumpRound::Closed closed = round->Close();
    const bool complete = closed.complete;
    RoundInfo info;
    size_t never_told = 0;  // agents still waiting for their turn to upload
    {
      MutexLock lock(mu);
      info = round->info;
      never_told = round->pacing.waiting();
    }
    if (never_told > 0)
      Log(LogLevel::kWarn,
          "collector: dump round %s ends with %zu agents still waiting for their turn to upload; "
          "raise --upload-window (now %zu) or XTIMER_DUMP_WAIT",
          round->dump_id.c_str(), never_told, opt.upload_window);
    const int32_t world = closed.world;
    MergedRound merged = MergeRound(*round, std::move(closed), std::move(info), opt.output_formats, &writer);
    double took = opt.monotonic_s() - now;
    Log(LogLevel::kWarn, "collector: dump round %s merged %zu of %d ranks%s%s into %s (%.1f s)", round->dump_id.c_str(),
        merged.info.reported_count, world, merged.info.missing_count ? ", missing " : "",
        merged.info.ranks_missing.c_str(), round->dir.empty() ? "(nothing)" : round->dir.c_str(), took);
    for (const std::string& line : merged.info.summary) Log(LogLevel::kWarn, "collector:   %s", line.c_str());
    MutexLock lock(mu);
    round->info = std::move(merged.info);
    round->files = std::move(merged.files);
    if (!complete) ++counters.dump_rounds_timed_out;
    last_round_missing = static_cast<int32_t>(round->info.missing_count);
  }

  // ---- reading: snapshots under mu, text after (core_status.h) ----

  MetricsSnapshot TakeMetricsSnapshot() const XT_EXCLUDES(mu) {
    MetricsSnapshot s;
    s.slowdown = slow.Latest();  // before mu: the watch's lock is never taken under it
    const double now = Now();
    MutexLock lock(mu);
    s.reports.reserve(ranks.entries().size());
    for (const auto& [rank, e] : ranks.entries()) {
      if (!e.reported) continue;
      s.reports.push_back(e.report);
      s.ages.emplace_back(rank, now - e.last_seen_s);
    }
    s.counters = CountersLocked();
    for (int i = 0; i < kRefusalCount; ++i) s.refused[i] = refusals[i];
    s.sessions = sessions.size();
    s.connected = sessions.Connected();
    s.active_rounds = active.size();
    s.world = ranks.world();
    s.last_round_missing = last_round_missing;
    s.hang_active = episode.active();
    return s;
  }

  StatusSnapshot TakeStatusSnapshot() const XT_EXCLUDES(mu) {
    StatusSnapshot s;
    s.slowdown = slow.Latest();
    const double now = Now();
    s.dump_wait_s = opt.dump_wait_s;
    s.stale_after_s = opt.stale_after_s;
    MutexLock lock(mu);
    s.time = IsoUtcMs(opt.wall_ms());
    s.world = ranks.world();
    s.ranks_known = ranks.entries().size();
    s.connected = sessions.Connected();
    s.sessions = sessions.size();
    s.hang_active = episode.active();
    // The ranks are copied under the lock and turned into JSON after it (10,000 ranks would
    // hold Report calls up for the whole build).
    s.rows.reserve(ranks.entries().size());
    for (const auto& [rank, e] : ranks.entries()) {
      StatusSnapshot::Row& r =
          s.rows.emplace_back(StatusSnapshot::Row{rank, e.reported, now - e.last_seen_s, e.last_seen_wall_ms, {}});
      *r.report.mutable_rank() = e.report.rank();
      r.report.set_state(e.report.state());
      r.report.set_oldest_inflight_s(e.report.oldest_inflight_s());
      r.report.set_oldest_inflight_op(e.report.oldest_inflight_op());
      r.report.set_trigger(e.report.trigger());
      r.report.set_dumps(e.report.dumps());
      r.report.set_exit_code(e.report.exit_code());
    }
    s.rounds = RoundsJson(rounds, now);
    s.evictions.assign(evictions.begin(), evictions.end());
    s.counters = CountersLocked();
    return s;
  }
};

// ---------------------------------------------------------------------------------------------

CollectorCore::CollectorCore(CoreOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
CollectorCore::~CollectorCore() = default;

std::string CollectorCore::Register(const v1::RegisterRequest& request, SendCommand send, std::string* error) {
  return impl_->Register(request, std::move(send), error);
}

void CollectorCore::Disconnect(const std::string& session) {
  MutexLock lock(impl_->mu);
  impl_->sessions.Disconnect(session, impl_->Now());
}

bool CollectorCore::HasSession(const std::string& session) const {
  MutexLock lock(impl_->mu);
  return impl_->sessions.Find(session) != nullptr;
}

bool CollectorCore::Report(const v1::ReportRequest& request, v1::Command* reply_command) {
  return impl_->Report(request, reply_command);
}
v1::UploadReply CollectorCore::Upload(const v1::StackUpload& upload) { return impl_->Upload(upload); }
bool CollectorCore::Steps(const std::string& session, std::vector<slowdown::StepRecord> records,
                          slowdown::Verdict* reply) {
  return impl_->Steps(session, std::move(records), reply);
}
slowdown::Verdict CollectorCore::Slowdown() const { return impl_->slow.Latest(); }
void CollectorCore::Tick() { impl_->Tick(false); }
void CollectorCore::FinishRounds() { impl_->Tick(true); }

std::string CollectorCore::MetricsText() const {
  PrometheusText t;
  AppendMetrics(&t);
  return t.Text();
}

void CollectorCore::AppendMetrics(PrometheusText* out) const { AppendCoreMetrics(impl_->TakeMetricsSnapshot(), out); }

std::string CollectorCore::StatusJson() const {
  return StatusJsonOf(impl_->TakeStatusSnapshot()).dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string CollectorCore::StatusPageHtml(std::string_view round_link_prefix) const {
  return RenderStatusPage(StatusJsonOf(impl_->TakeStatusSnapshot()), round_link_prefix);
}

std::vector<RoundInfo> CollectorCore::Rounds() const {
  MutexLock lock(impl_->mu);
  std::vector<RoundInfo> out;
  for (const auto& r : impl_->rounds) {
    out.push_back(r->info);
    if (!out.back().finished) out.back().reported_count = r->Received();
  }
  return out;
}

std::optional<std::string> CollectorCore::RoundFile(std::string_view name, std::string_view file) const {
  MutexLock lock(impl_->mu);
  for (const auto& r : impl_->rounds)
    if (r->info.finished && r->name == name && r->dir_ok && r->files.contains(std::string(file)))
      return r->dir + "/" + std::string(file);
  return std::nullopt;
}

CoreCounters CollectorCore::Counters() const {
  MutexLock lock(impl_->mu);
  return impl_->CountersLocked();
}

size_t CollectorCore::SessionsConnected() const {
  MutexLock lock(impl_->mu);
  return impl_->sessions.Connected();
}

}  // namespace xtimer::collector
