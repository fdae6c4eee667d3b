#include "collector/collector_core.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "common/atomic_file.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/rank_metrics.h"
#include "common/rank_set.h"
#include "common/stack_file.h"
#include "common/stack_reader.h"
#include "viewer/merge_output.h"
#include "viewer/stack_merger.h"
#include "viewer/verdict.h"

namespace xtimer::collector {
namespace {

constexpr size_t kMaxSessions = 100000;
constexpr size_t kMaxRoundsKept = 50;
constexpr size_t kMaxFinishedIds = 1000;
constexpr size_t kMaxOpsPerRank = 512;
constexpr size_t kMaxSkippedPerRound = 1000;
constexpr size_t kMaxPendingBytes = size_t{512} << 20;  // self dumps waiting for a round
constexpr size_t kMaxWriteQueueBytes = size_t{128} << 20;  // stack files waiting for the writer thread
// A dump round asks the agent whose report started it at once, and every other agent with the
// reply to its next report, or on the first Tick this long after the start, whichever comes
// first. When all ranks hang at once their reports arrive together: the DUMPs then ride on the
// replies instead of a second burst of as many messages on the command streams.
constexpr double kDumpFanoutDelayS = 0.1;

double RealMonotonic() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int64_t RealWallMs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1000000;
}

// Cuts s to at most n bytes without splitting a UTF-8 sequence.
void Truncate(std::string* s, size_t n) {
  if (s->size() <= n) return;
  while (n > 0 && (static_cast<unsigned char>((*s)[n]) & 0xC0) == 0x80) --n;
  s->resize(n);
}

std::string Printable(std::string_view s, size_t n = 64) {
  std::string out;
  for (char c : s.substr(0, n)) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  if (s.size() > n) out += "...";
  return out;
}

// "20261122T101530Z"
std::string CompactUtc(int64_t unix_ms) {
  time_t secs = static_cast<time_t>(unix_ms / 1000);
  tm t;
  gmtime_r(&secs, &t);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d%02d%02dT%02d%02d%02dZ", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday, t.tm_hour,
                t.tm_min, t.tm_sec);
  return buf;
}

std::string IsoUtcMs(int64_t unix_ms) { return IsoUtc(static_cast<uint64_t>(std::max<int64_t>(unix_ms, 0)) * 1000000ull); }

const char* StateName(v1::RankState s) {
  switch (s) {
    case v1::RANK_STATE_RUNNING: return "running";
    case v1::RANK_STATE_HUNG: return "hung";
    case v1::RANK_STATE_EXITED: return "exited";
    default: return "unknown";
  }
}

// Keeps a flood of refusals from flooding the log: at most `burst` lines per `period_s`, then one
// line saying how many were left out.
class LogLimiter {
 public:
  bool Allow(double now, uint64_t* suppressed_before) {
    std::lock_guard<std::mutex> lock(mu_);
    if (now - window_start_ >= kPeriod) {
      *suppressed_before = suppressed_;
      suppressed_ = 0;
      window_start_ = now;
      lines_ = 0;
    } else {
      *suppressed_before = 0;
    }
    if (lines_ < kBurst) {
      ++lines_;
      return true;
    }
    ++suppressed_;
    return false;
  }

 private:
  static constexpr double kPeriod = 10;
  static constexpr int kBurst = 20;
  std::mutex mu_;
  double window_start_ = -1e18;
  int lines_ = 0;
  uint64_t suppressed_ = 0;
};

// Refusal reasons, for the metrics (fixed label values).
enum class Refusal { kUnknownSession, kTooLarge, kBadRank, kUnknownRound, kRoundClosed, kParse, kRankMismatch,
                     kWorldMismatch, kMerge, kCount };
constexpr const char* kRefusalNames[] = {"unknown_session", "too_large", "bad_rank", "unknown_round", "round_closed",
                                         "parse", "rank_mismatch", "world_mismatch", "merge"};

}  // namespace

// ---------------------------------------------------------------------------------------------

struct Round {
  // Set at start, then read-only.
  std::string dump_id, name, dir;
  double started_s = 0, deadline_s = 0;
  bool dir_ok = false;

  std::atomic<bool> complete{false};
  std::atomic<bool> needs_import{true};
  int pending_writes = 0;  // stack files queued for the writer thread (under the core's write_mu)

  // Under mu.
  std::mutex mu;
  bool closed = false;
  int32_t world = 0;  // 0: taken from the first stack file
  std::unique_ptr<StackMerger> merger;
  std::unordered_set<int32_t> have;
  size_t skipped = 0;

  // Under the core's mu_.
  RoundInfo info;
  std::set<std::string> files;  // what RoundFile may serve
  // Upload pacing: sessions holding their stacks until told, and those uploading now (with
  // the time of their grant or last upload).
  std::deque<std::string> to_grant;
  std::unordered_map<std::string, double> granted;
  std::unordered_set<std::string> asked;  // sessions sent this round's DUMP
  bool fanned_out = false;                // every connected session was asked (kDumpFanoutDelayS)
};

struct PendingDump {  // a rank's own dump (dump_id "") received while no round was open
  std::string bytes;
  std::string source;
  double received_s = 0;
};

struct CollectorCore::Impl {
  explicit Impl(CoreOptions o) : opt(std::move(o)) {
    if (!opt.monotonic_s) opt.monotonic_s = RealMonotonic;
    if (!opt.wall_ms) opt.wall_ms = RealWallMs;
    if (!(opt.dump_wait_s >= 0)) opt.dump_wait_s = 30;
    std::random_device rd;
    rng.seed((uint64_t{rd()} << 32) ^ rd());
    std::string error;
    if (!opt.out_dir.empty() && !MakeDirs(opt.out_dir, &error))
      Log(LogLevel::kError, "collector: cannot create the output folder %s: %s (dump rounds will not be written)",
          opt.out_dir.c_str(), error.c_str());
  }

  struct Session {
    std::string node, agent_id;
    SendCommand send;
    std::set<int32_t> ranks;  // the ranks it registered or reported
    bool connected = true;
    double last_seen_s = 0;
  };

  struct Outgoing {  // a command for one agent, sent once the core's locks are released
    SendCommand send;
    v1::Command command;
  };

  struct RankEntry {
    v1::RankReport report;
    double last_seen_s = 0;
    int64_t last_seen_wall_ms = 0;
    bool reported = false;  // false: known only from a registration
  };

  CoreOptions opt;
  mutable std::mutex mu;  // everything below except what Round guards itself
  std::mt19937_64 rng;
  std::unordered_map<std::string, Session> sessions;
  std::unordered_map<std::string, std::string> session_of_agent;
  std::map<int32_t, RankEntry> ranks;
  int32_t world = 0;
  bool episode_active = false;
  double next_episode_check_s = 0;
  std::vector<std::shared_ptr<Round>> active;       // oldest first
  std::deque<std::shared_ptr<Round>> rounds;        // newest first, finished and active
  std::deque<std::string> finished_ids;
  std::set<std::string> used_names;
  std::map<int32_t, PendingDump> pending;
  size_t pending_bytes = 0;
  CoreCounters counters;  // the upload counters are the atomics below
  // Counted without mu: a refusal may happen under a round's mutex, which is taken after mu.
  std::atomic<uint64_t> uploads_accepted{0}, uploads_duplicate{0}, uploads_refused{0};
  std::atomic<uint64_t> refusals[static_cast<int>(Refusal::kCount)] = {};
  int32_t last_round_missing = 0;
  std::mutex finish_mu;  // one merge at a time

  // Stack files are written by one thread, off the upload's path (creating thousands of files
  // costs the kernel more than parsing them). A full queue makes the upload write itself.
  std::mutex write_mu;
  std::condition_variable write_cv, write_done_cv;
  struct WriteJob {
    std::string path, bytes;
    std::shared_ptr<Round> round;
  };
  std::deque<WriteJob> write_queue;
  size_t write_queue_bytes = 0;
  bool writer_stop = false;
  std::thread writer;

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(write_mu);
      writer_stop = true;
    }
    write_cv.notify_all();
    if (writer.joinable()) writer.join();
  }

  void QueueWrite(std::string path, const std::string& bytes, const std::shared_ptr<Round>& round) {
    {
      std::lock_guard<std::mutex> lock(write_mu);
      if (write_queue_bytes + bytes.size() <= kMaxWriteQueueBytes) {
        if (!writer.joinable()) writer = std::thread([this] { WriterLoop(); });
        ++round->pending_writes;
        write_queue_bytes += bytes.size();
        write_queue.push_back(WriteJob{std::move(path), bytes, round});
        write_cv.notify_one();
        return;
      }
    }
    WriteNewFile(path, bytes);
  }

  void WriterLoop() {
    setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);  // bulk work: after calls and merges
    std::unique_lock<std::mutex> lock(write_mu);
    for (;;) {
      write_cv.wait(lock, [&] { return writer_stop || !write_queue.empty(); });
      if (write_queue.empty()) return;  // stopping, and everything is written
      WriteJob job = std::move(write_queue.front());
      write_queue.pop_front();
      lock.unlock();
      WriteNewFile(job.path, job.bytes);
      lock.lock();
      write_queue_bytes -= job.bytes.size();
      --job.round->pending_writes;
      write_done_cv.notify_all();
    }
  }

  // A round's stack files are on disk before its merge is (a reader that sees verdict.json
  // finds every stack file beside it).
  void WaitForWrites(Round* round) {
    std::unique_lock<std::mutex> lock(write_mu);
    if (!write_done_cv.wait_for(lock, std::chrono::seconds(120), [&] { return round->pending_writes == 0; }))
      Log(LogLevel::kError, "collector: %d stack files of dump round %s are still not written after 120 s",
          round->pending_writes, round->dump_id.c_str());
  }
  LogLimiter refusal_log, report_log;

  double Now() const { return opt.monotonic_s(); }

  CoreCounters CountersLocked() const {
    CoreCounters c = counters;
    c.uploads_accepted = uploads_accepted;
    c.uploads_duplicate = uploads_duplicate;
    c.uploads_refused = uploads_refused;
    return c;
  }

  std::string NewId(size_t hex_digits) {
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

  void LogRefusal(const std::string& what) {
    uint64_t suppressed = 0;
    bool allow = refusal_log.Allow(Now(), &suppressed);
    if (suppressed > 0) Log(LogLevel::kWarn, "collector: %llu more refused uploads were not logged", (unsigned long long)suppressed);
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

  // ---- sessions and reports ----

  std::string Register(const v1::RegisterRequest& req, SendCommand send, std::string* error) {
    std::string why;
    std::vector<Outgoing> out;
    std::string session;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (req.protocol_version() != 1) {
        why = "protocol version " + std::to_string(req.protocol_version()) + " is not supported (this collector speaks 1)";
      } else if (sessions.size() >= kMaxSessions && !session_of_agent.contains(req.agent_id())) {
        why = "too many agents (" + std::to_string(kMaxSessions) + " sessions); try again later";
      }
      if (!why.empty()) {
        ++counters.registrations_refused;
      } else {
        ++counters.registrations;
        if (!req.agent_id().empty()) {
          auto it = session_of_agent.find(req.agent_id());
          if (it != session_of_agent.end()) sessions.erase(it->second);  // a reconnect replaces
        }
        session = NewId(32);
        Session& s = sessions[session];
        s.node = req.node();
        Truncate(&s.node, 255);
        s.agent_id = req.agent_id();
        Truncate(&s.agent_id, 255);
        s.send = send;
        s.last_seen_s = Now();
        if (!s.agent_id.empty()) session_of_agent[s.agent_id] = session;
        for (const v1::Rank& r : req.ranks()) {
          if (!ValidRank(r)) continue;
          AdoptWorldLocked(r.world_size());
          s.ranks.insert(r.rank());
          RankEntry& e = ranks[r.rank()];
          if (!e.reported) {
            *e.report.mutable_rank() = r;
            Truncate(e.report.mutable_rank()->mutable_host(), 255);
          }
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

  static bool ValidRank(const v1::Rank& r) {
    return r.world_size() >= 1 && r.world_size() <= kMaxStackWorldSize && r.rank() >= 0 && r.rank() < r.world_size();
  }

  bool Report(const v1::ReportRequest& req, v1::Command* reply_command) {
    const double now = Now();
    const int64_t wall = opt.wall_ms();
    std::vector<Outgoing> out;
    uint64_t invalid = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      ++counters.report_calls;
      auto sit = sessions.find(req.session());
      if (sit == sessions.end()) {
        ++counters.reports_unknown_session;
        return false;
      }
      sit->second.last_seen_s = now;
      const v1::RankReport* hang = nullptr;
      for (const v1::RankReport& r : req.reports()) {
        if (!ValidRank(r.rank())) {
          ++invalid;
          continue;
        }
        ++counters.rank_reports;
        AdoptWorldLocked(r.rank().world_size());
        sit->second.ranks.insert(r.rank().rank());
        RankEntry& e = ranks[r.rank().rank()];
        v1::RankState prev = e.reported ? e.report.state() : v1::RANK_STATE_UNKNOWN;
        if (r.ops_size() == 0 && e.reported) {
          // A state-only report (a hang event) keeps the op statistics of the last full one.
          google::protobuf::RepeatedPtrField<v1::OpStat> ops;
          ops.Swap(e.report.mutable_ops());
          e.report = r;
          e.report.mutable_ops()->Swap(&ops);
        } else {
          e.report = r;
          if (e.report.ops_size() > static_cast<int>(kMaxOpsPerRank))
            e.report.mutable_ops()->DeleteSubrange(kMaxOpsPerRank, e.report.ops_size() - kMaxOpsPerRank);
          for (v1::OpStat& op : *e.report.mutable_ops()) {
            Truncate(op.mutable_name(), 256);
            Truncate(op.mutable_kind(), 32);
            Truncate(op.mutable_comm(), 64);
            Truncate(op.mutable_shape(), 128);
          }
        }
        Truncate(e.report.mutable_rank()->mutable_host(), 255);
        Truncate(e.report.mutable_trigger(), 1024);
        Truncate(e.report.mutable_oldest_inflight_op(), 512);
        e.reported = true;
        e.last_seen_s = now;
        e.last_seen_wall_ms = wall;
        if (r.state() == v1::RANK_STATE_HUNG && prev != v1::RANK_STATE_HUNG && hang == nullptr) hang = &r;
      }
      counters.rank_reports_invalid += invalid;
      if (hang != nullptr && !episode_active) {
        episode_active = true;
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
        else
          out.push_back(std::move(*dump));
      }
    }
    if (invalid > 0) {
      uint64_t suppressed = 0;
      if (report_log.Allow(now, &suppressed))
        Log(LogLevel::kWarn, "collector: dropped %llu rank reports of session %.8s... (rank outside [0, world_size) or "
            "world_size outside [1, 2^20])", (unsigned long long)invalid, req.session().c_str());
    }
    SendAll(out);
    return true;
  }

  // Under mu, before a rank's entry is touched. The job's world size is the one its ranks report
  // now: after an elastic restart with another world size, what the old world's ranks said is
  // forgotten, so no dump round waits for a rank that no longer exists or names it missing.
  void AdoptWorldLocked(int32_t w) {
    if (w == world) return;
    if (world != 0)
      Log(LogLevel::kInfo, "collector: the job's world size is now %d (was %d)", static_cast<int>(w),
          static_cast<int>(world));
    world = w;
    for (auto it = ranks.begin(); it != ranks.end();)
      it = it->second.report.rank().world_size() != w ? ranks.erase(it) : std::next(it);
    for (auto& [id, s] : sessions) std::erase_if(s.ranks, [w](int32_t r) { return r >= w; });
  }

  // Under mu. Makes the round and its folder. The agents are asked by Report and Tick.
  void StartRound(const v1::RankReport& hang, double now, int64_t wall) {
    auto round = std::make_shared<Round>();
    round->dump_id = NewId(16);
    round->started_s = now;
    round->deadline_s = now + opt.dump_wait_s;
    round->world = world;
    round->merger = std::make_unique<StackMerger>(MergeOptions{.world_size = world});
    // The hang time: the report's own clock when it is sane, else ours.
    int64_t hang_ms = hang.time_unix_ms();
    if (hang_ms <= 0 || std::llabs(hang_ms - wall) > 86400000) hang_ms = wall;
    std::string base = CompactUtc(hang_ms);
    for (int n = 1; n < 1000; ++n) {
      std::string name = n == 1 ? base : base + "-" + std::to_string(n);
      if (used_names.contains(name)) continue;
      if (opt.out_dir.empty()) {
        round->name = name;
        break;
      }
      std::string dir = opt.out_dir + "/" + name;
      if (mkdir(dir.c_str(), 0755) == 0) {
        round->name = name;
        round->dir = dir;
        round->dir_ok = true;
        break;
      }
      if (errno != EEXIST) {
        Log(LogLevel::kError, "collector: cannot create %s: %s (this dump round is merged but not written)",
            dir.c_str(), strerror(errno));
        round->name = name;
        round->dir = dir;
        break;
      }
    }
    if (round->name.empty()) round->name = base + "-" + round->dump_id;  // 999 rounds in one second
    used_names.insert(round->name);
    RoundInfo& info = round->info;
    info.name = round->name;
    info.dir = round->dir;
    info.dump_id = round->dump_id;
    info.hang_unix_ms = hang_ms;
    info.world_size = world;
    info.trigger = "rank " + std::to_string(hang.rank().rank()) + (hang.trigger().empty() ? "" : ": " + hang.trigger());
    Truncate(&info.trigger, 300);
    if (!round->dir_ok && info.error.empty() && !opt.out_dir.empty()) info.error = "the round's folder could not be created";
    active.push_back(round);
    rounds.push_front(round);
    while (rounds.size() > kMaxRoundsKept) {
      used_names.erase(rounds.back()->name);
      rounds.pop_back();
    }
    ++counters.dump_rounds;
    size_t agents = 0;
    for (const auto& [id, s] : sessions) agents += s.connected && s.send;
    Log(LogLevel::kWarn, "collector: rank %d reports a hang (%s); dump round %s asks %zu agents for every rank's "
        "stacks (waiting up to %g s), output %s", hang.rank().rank(), Printable(hang.trigger(), 200).c_str(),
        round->dump_id.c_str(), agents, opt.dump_wait_s, round->dir.empty() ? "(none)" : round->dir.c_str());
  }

  // ---- upload pacing ----

  static void SendAll(const std::vector<Outgoing>& out) {
    for (const Outgoing& o : out) o.send(o.command);
  }

  static v1::Command MakeCommand(v1::Command::Kind kind, const std::string& dump_id, bool wait = false) {
    v1::Command c;
    c.set_kind(kind);
    c.set_dump_id(dump_id);
    c.set_wait_for_upload(wait);
    return c;
  }

  // Under mu. The round's DUMP for one session, unless it was asked already or cannot be
  // reached: upload at once while the window has room, else hold.
  std::optional<Outgoing> AskToDump(Round& round, const std::string& session) {
    auto it = sessions.find(session);
    if (it == sessions.end() || !it->second.connected || !it->second.send) return std::nullopt;
    if (!round.asked.insert(session).second) return std::nullopt;
    bool upload_now = opt.upload_window == 0 || round.granted.size() < opt.upload_window;
    if (opt.upload_window != 0) {
      if (upload_now) round.granted[session] = Now();
      else round.to_grant.push_back(session);
    }
    ++counters.dump_commands_sent;
    counters.dump_commands_held += !upload_now;
    return Outgoing{it->second.send, MakeCommand(v1::Command::DUMP, round.dump_id, !upload_now)};
  }

  // Under mu. Every connected session the round has not asked yet, once kDumpFanoutDelayS passed.
  void FanOut(Round& round, double now, std::vector<Outgoing>* out) {
    if (round.fanned_out || now < round.started_s + kDumpFanoutDelayS) return;
    round.fanned_out = true;
    for (const auto& [id, s] : sessions)
      if (std::optional<Outgoing> dump = AskToDump(round, id)) out->push_back(std::move(*dump));
  }

  // Under mu (takes round.mu): every rank the session is known to have has stacks in the round.
  bool SessionDone(Round& round, const std::string& session) {
    auto it = sessions.find(session);
    if (it == sessions.end()) return true;
    if (it->second.ranks.empty()) return false;
    std::lock_guard<std::mutex> lock(round.mu);
    for (int32_t r : it->second.ranks)
      if (!round.have.contains(r)) return false;
    return true;
  }

  // Under mu. Lets waiting sessions upload while the window has room.
  void GrantNext(Round& round, double now, std::vector<Outgoing>* out) {
    while (round.granted.size() < opt.upload_window && !round.to_grant.empty()) {
      std::string session = std::move(round.to_grant.front());
      round.to_grant.pop_front();
      auto it = sessions.find(session);
      if (it == sessions.end() || !it->second.connected || !it->second.send) continue;
      round.granted[session] = now;
      out->push_back(Outgoing{it->second.send, MakeCommand(v1::Command::UPLOAD, round.dump_id)});
      ++counters.upload_commands_sent;
    }
  }

  // After an upload of `session` for `round`: a session whose ranks are all in leaves the window.
  void PaceAfterUpload(Round& round, const std::string& session) {
    if (opt.upload_window == 0) return;
    std::vector<Outgoing> out;
    {
      std::lock_guard<std::mutex> lock(mu);
      const double now = Now();
      auto g = round.granted.find(session);
      if (g == round.granted.end()) return;
      g->second = now;
      if (!SessionDone(round, session)) return;
      round.granted.erase(g);
      GrantNext(round, now, &out);
    }
    SendAll(out);
  }

  // Under mu. Sessions that finished, went away or stay silent leave the window.
  void PaceOnTick(Round& round, double now, std::vector<Outgoing>* out) {
    for (auto it = round.granted.begin(); it != round.granted.end();) {
      auto s = sessions.find(it->first);
      bool gone = s == sessions.end() || !s->second.connected;
      if (gone || now - it->second >= opt.upload_idle_s || SessionDone(round, it->first)) it = round.granted.erase(it);
      else ++it;
    }
    GrantNext(round, now, out);
  }

  // ---- uploads ----

  v1::UploadReply Upload(const v1::StackUpload& u) {
    std::shared_ptr<Round> round;
    v1::UploadReply reply = Accept(u, &round);
    if (round) PaceAfterUpload(*round, u.session());
    return reply;
  }

  // *round_out: the round the upload was for, if it is open.
  v1::UploadReply Accept(const v1::StackUpload& u, std::shared_ptr<Round>* round_out) {
    const double now = Now();
    const int32_t rank = u.rank();
    std::shared_ptr<Round>& round = *round_out;
    std::string source;
    {
      std::unique_lock<std::mutex> lock(mu);
      auto sit = sessions.find(u.session());
      if (sit == sessions.end()) {
        lock.unlock();
        return Refuse(Refusal::kUnknownSession, "an upload (rank " + std::to_string(rank) + ")",
                      "unknown session (the collector restarted?): register again");
      }
      sit->second.last_seen_s = now;
      source = "node " + Printable(sit->second.node) + " rank " + std::to_string(rank) + " upload";
      if (!u.dump_id().empty()) {
        for (auto& r : active)
          if (r->dump_id == u.dump_id()) round = r;
        if (!round) {
          // A round merged a moment ago: stacks it already has are a duplicate, not an error.
          for (auto& r : rounds)
            if (r->dump_id == u.dump_id()) {
              std::lock_guard<std::mutex> rl(r->mu);
              if (r->have.contains(rank)) {
                lock.unlock();
                ++uploads_duplicate;
                v1::UploadReply reply;
                reply.set_accepted(true);
                reply.set_reason("dump round " + r->dump_id + " is merged and has rank " + std::to_string(rank) +
                                 "'s stacks");
                return reply;
              }
            }
          bool finished = std::find(finished_ids.begin(), finished_ids.end(), u.dump_id()) != finished_ids.end();
          lock.unlock();
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
    if (round) {
      std::lock_guard<std::mutex> lock(round->mu);
      if (round->have.contains(rank)) return Duplicate(*round, rank);
    }
    // Parse outside every lock: uploads of many ranks are read in parallel.
    thread_local StackFile file;
    std::string error;
    if (!ParseStackFile(u.stack_json(), &file, &error)) {
      if (round) NoteSkipped(round.get(), source, error);
      return Refuse(Refusal::kParse, source, "not a usable stack file: " + error);
    }
    if (file.rank != rank)
      return Refuse(Refusal::kRankMismatch, source,
                    "the stack file is rank " + std::to_string(file.rank) + "'s, the upload says rank " + std::to_string(rank));
    if (!round) return KeepPending(rank, u.stack_json(), source, now);
    return AddToRound(round, file, u.stack_json(), source);
  }

  v1::UploadReply Duplicate(const Round& round, int32_t rank) {
    ++uploads_duplicate;
    v1::UploadReply r;
    r.set_accepted(true);
    r.set_reason("dump round " + round.dump_id + " already has rank " + std::to_string(rank) + "'s stacks; kept the first");
    return r;
  }

  void NoteSkipped(Round* round, const std::string& source, const std::string& reason) {
    std::lock_guard<std::mutex> lock(round->mu);
    if (!round->closed && round->skipped < kMaxSkippedPerRound) {
      round->merger->Skip(source, reason);
      ++round->skipped;
    }
  }

  // `count`: false for dumps taken in from `pending` (counted when they came).
  v1::UploadReply AddToRound(const std::shared_ptr<Round>& round, const StackFile& file, const std::string& bytes, const std::string& source,
                             bool count = true) {
    std::string path;
    {
      std::lock_guard<std::mutex> lock(round->mu);
      if (round->closed)
        return Refuse(Refusal::kRoundClosed, source, "dump round " + round->dump_id + " was merged before these stacks arrived");
      if (round->have.contains(file.rank)) return Duplicate(*round, file.rank);
      if (round->world != 0 && file.world_size != round->world) {
        std::string reason = "the stack file says world size " + std::to_string(file.world_size) + ", the job's is " +
                             std::to_string(round->world);
        if (round->skipped < kMaxSkippedPerRound) round->merger->Skip(source, reason), ++round->skipped;
        return Refuse(Refusal::kWorldMismatch, source, reason);
      }
      std::string error;
      if (!round->merger->Add(file, source, &error)) return Refuse(Refusal::kMerge, source, error);
      if (round->world == 0) round->world = round->merger->world_size();
      round->have.insert(file.rank);
      if (round->have.size() >= static_cast<size_t>(round->world)) round->complete = true;
      if (round->dir_ok) {
        char name[64];
        std::snprintf(name, sizeof name, "/%05d-%05d.stacktrace", file.rank, round->world);
        path = round->dir + name;
      }
    }
    if (count) ++uploads_accepted;
    if (!path.empty()) QueueWrite(std::move(path), bytes, round);
    v1::UploadReply r;
    r.set_accepted(true);
    return r;
  }

  // A new file in a folder of ours: never follows or replaces anything already there.
  static void WriteNewFile(const std::string& path, const std::string& bytes) {
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    bool ok = fd >= 0;
    for (size_t done = 0; ok && done < bytes.size();) {
      ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      ok = n > 0;
      if (ok) done += n;
    }
    int saved = errno;
    if (fd >= 0) close(fd);
    if (!ok) {
      Log(LogLevel::kError, "collector: cannot write %s: %s (the merge still has it)", path.c_str(), strerror(saved));
      if (fd >= 0) unlink(path.c_str());
    }
  }

  v1::UploadReply KeepPending(int32_t rank, const std::string& bytes, const std::string& source, double now) {
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = pending.find(rank);
      if (it != pending.end()) pending_bytes -= it->second.bytes.size();
      PendingDump& p = pending[rank];
      p.bytes = bytes;
      p.source = source;
      p.received_s = now;
      pending_bytes += bytes.size();
      while (pending_bytes > kMaxPendingBytes && !pending.empty()) {  // the oldest goes first
        auto oldest = pending.begin();
        for (auto i = pending.begin(); i != pending.end(); ++i)
          if (i->second.received_s < oldest->second.received_s) oldest = i;
        pending_bytes -= oldest->second.bytes.size();
        pending.erase(oldest);
      }
    }
    ++uploads_accepted;
    v1::UploadReply r;
    r.set_accepted(true);
    r.set_reason("no dump round open: kept for one starting within " + std::to_string(static_cast<int>(opt.dump_wait_s)) + " s");
    return r;
  }

  // The dumps ranks took on their own shortly before the round started join it.
  void ImportPending(const std::shared_ptr<Round>& round) {
    std::vector<std::pair<int32_t, PendingDump>> take;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (auto it = pending.begin(); it != pending.end();) {
        if (it->second.received_s >= round->started_s - opt.dump_wait_s) {
          pending_bytes -= it->second.bytes.size();
          take.emplace_back(it->first, std::move(it->second));
          it = pending.erase(it);
        } else {
          ++it;
        }
      }
    }
    StackFile file;
    std::string error;
    for (auto& [rank, p] : take) {
      {
        std::lock_guard<std::mutex> lock(round->mu);
        if (round->have.contains(rank)) continue;
      }
      if (!ParseStackFile(p.bytes, &file, &error)) continue;  // checked when it came; cannot fail
      AddToRound(round, file, p.bytes, p.source, /*count=*/false);
    }
  }

  // ---- deadlines ----

  void Tick(bool finish_all) {
    const double now = Now();
    std::vector<std::shared_ptr<Round>> import, finish;
    std::vector<Outgoing> out;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (auto& r : active)
        if (r->needs_import.exchange(false)) import.push_back(r);
    }
    for (auto& r : import) ImportPending(r);
    {
      std::lock_guard<std::mutex> lock(mu);
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
      if (now >= next_episode_check_s) {
        next_episode_check_s = now + 1;
        if (episode_active) {
          bool any_hung = false;
          for (const auto& [rank, e] : ranks)
            if (e.reported && e.report.state() == v1::RANK_STATE_HUNG && now - e.last_seen_s <= opt.stale_after_s) {
              any_hung = true;
              break;
            }
          if (!any_hung) {
            episode_active = false;
            Log(LogLevel::kInfo, "collector: no rank reports a hang any more; the next hang starts a new dump round");
          }
        }
        for (auto it = sessions.begin(); it != sessions.end();) {
          if (!it->second.connected && now - it->second.last_seen_s > opt.session_idle_s) {
            auto a = session_of_agent.find(it->second.agent_id);
            if (a != session_of_agent.end() && a->second == it->first) session_of_agent.erase(a);
            it = sessions.erase(it);
          } else {
            ++it;
          }
        }
        for (auto it = pending.begin(); it != pending.end();) {
          if (now - it->second.received_s > std::max(opt.dump_wait_s, 1.0)) {
            pending_bytes -= it->second.bytes.size();
            it = pending.erase(it);
          } else {
            ++it;
          }
        }
      }
    }
    SendAll(out);
    for (auto& r : finish) FinishRound(r, now);
  }

  void FinishRound(const std::shared_ptr<Round>& round, double now) {
    std::lock_guard<std::mutex> serial(finish_mu);
    std::unique_ptr<StackMerger> merger;
    int32_t world;
    bool complete;
    {
      std::lock_guard<std::mutex> lock(round->mu);
      round->closed = true;
      merger = std::move(round->merger);
      world = round->world;
      complete = round->complete;
    }
    RoundInfo info;
    size_t never_told = 0;  // agents still waiting for their turn to upload
    {
      std::lock_guard<std::mutex> lock(mu);
      info = round->info;
      never_told = round->to_grant.size();
    }
    if (never_told > 0)
      Log(LogLevel::kWarn, "collector: dump round %s ends with %zu agents still waiting for their turn to upload; "
          "raise --upload-window (now %zu) or XTIMER_DUMP_WAIT", round->dump_id.c_str(), never_told, opt.upload_window);
    info.finished = true;
    info.timed_out = !complete;
    info.world_size = world;
    MergedStacks merged = std::move(*merger).Finish();
    merger.reset();
    if (merged.world_size == 0) merged.world_size = world;
    Verdict verdict = ComputeVerdict(merged);
    info.ranks_reported = verdict.reported.Fold(64);
    info.ranks_missing = verdict.missing.Fold(64);
    info.reported_count = verdict.reported.size();
    info.missing_count = verdict.missing.size();
    info.summary = verdict.summary;
    for (const Suspect& s : verdict.suspects) {
      if (info.suspects.size() >= 100) break;
      info.suspects.emplace_back(s.rank, s.reason);
    }
    std::set<std::string> files;
    if (round->dir_ok) {
      WaitForWrites(round.get());
      OutputOptions out;
      if (opt.output_formats != 0) out.formats = opt.output_formats;
      OutputResult result;
      std::string error;
      if (!WriteMergeOutputs(merged, verdict, out, round->dir, &result, &error)) {
        info.error = "merge not written: " + error;
        Log(LogLevel::kError, "collector: dump round %s: %s", round->dump_id.c_str(), info.error.c_str());
      }
      for (const std::string& w : result.warnings) Log(LogLevel::kWarn, "collector: dump round %s: %s", round->dump_id.c_str(), w.c_str());
      info.files = result.written;
      files.insert(result.written.begin(), result.written.end());
    }
    double took = opt.monotonic_s() - now;
    Log(LogLevel::kWarn, "collector: dump round %s merged %zu of %d ranks%s%s into %s (%.1f s)", round->dump_id.c_str(),
        info.reported_count, world, info.missing_count ? ", missing " : "", info.ranks_missing.c_str(),
        round->dir.empty() ? "(nothing)" : round->dir.c_str(), took);
    for (const std::string& line : info.summary) Log(LogLevel::kWarn, "collector:   %s", line.c_str());
    std::lock_guard<std::mutex> lock(mu);
    round->info = std::move(info);
    round->files = std::move(files);
    if (!complete) ++counters.dump_rounds_timed_out;
    last_round_missing = static_cast<int32_t>(round->info.missing_count);
  }

  // ---- reading ----

  void AppendMetrics(PrometheusText* out) const {
    std::vector<v1::RankReport> reports;
    std::vector<std::pair<int32_t, double>> ages;
    std::vector<std::string> hosts;
    CoreCounters c;
    uint64_t refused[static_cast<int>(Refusal::kCount)];
    size_t n_sessions, n_connected = 0, n_active;
    int32_t w, missing;
    bool episode;
    const double now = Now();
    {
      std::lock_guard<std::mutex> lock(mu);
      reports.reserve(ranks.size());
      for (const auto& [rank, e] : ranks) {
        if (!e.reported) continue;
        reports.push_back(e.report);
        ages.emplace_back(rank, now - e.last_seen_s);
      }
      c = CountersLocked();
      for (int i = 0; i < static_cast<int>(Refusal::kCount); ++i) refused[i] = refusals[i];
      n_sessions = sessions.size();
      for (const auto& [id, s] : sessions) n_connected += s.connected;
      n_active = active.size();
      w = world;
      missing = last_round_missing;
      episode = episode_active;
    }
    AppendRankMetrics(reports, out);
    out->Family("xtimer_rank_report_age_seconds", "gauge", "Seconds since the collector last heard from the rank");
    for (size_t i = 0; i < reports.size(); ++i)
      out->Add("xtimer_rank_report_age_seconds",
               {{"rank", std::to_string(ages[i].first)}, {"host", reports[i].rank().host()}}, ages[i].second);
    auto gauge = [&](const char* name, const char* help, double v) {
      out->Family(name, "gauge", help);
      out->Add(name, {}, v);
    };
    auto counter = [&](const char* name, const char* help, const Labels& l, double v) {
      out->Family(name, "counter", help);
      out->Add(name, l, v);
    };
    gauge("xtimer_collector_agents_connected", "Agents with an open command stream", static_cast<double>(n_connected));
    gauge("xtimer_collector_sessions", "Agent sessions the collector knows", static_cast<double>(n_sessions));
    gauge("xtimer_collector_ranks_known", "Ranks that have reported", static_cast<double>(reports.size()));
    gauge("xtimer_collector_world_size", "The job's world size (as its ranks report it now)", w);
    gauge("xtimer_collector_hang_active", "1 while a hang episode is on (some rank reports a hang)", episode ? 1 : 0);
    gauge("xtimer_collector_dump_rounds_active", "Dump rounds waiting for stacks", static_cast<double>(n_active));
    gauge("xtimer_collector_last_round_ranks_missing", "Ranks without stacks in the last finished dump round", missing);
    counter("xtimer_collector_registrations_total", "Agent registrations", {{"result", "accepted"}}, c.registrations);
    counter("xtimer_collector_registrations_total", "", {{"result", "refused"}}, c.registrations_refused);
    counter("xtimer_collector_report_calls_total", "Report calls from agents", {{"result", "ok"}},
            c.report_calls - c.reports_unknown_session);
    counter("xtimer_collector_report_calls_total", "", {{"result", "unknown_session"}}, c.reports_unknown_session);
    counter("xtimer_collector_rank_reports_total", "Rank reports inside Report calls", {{"result", "ok"}}, c.rank_reports);
    counter("xtimer_collector_rank_reports_total", "", {{"result", "invalid"}}, c.rank_reports_invalid);
    counter("xtimer_collector_uploads_total", "Stack uploads taken", {{"result", "accepted"}}, c.uploads_accepted);
    counter("xtimer_collector_uploads_total", "", {{"result", "duplicate"}}, c.uploads_duplicate);
    out->Family("xtimer_collector_uploads_refused_total", "counter", "Stack uploads refused, by reason");
    for (int i = 0; i < static_cast<int>(Refusal::kCount); ++i)
      out->Add("xtimer_collector_uploads_refused_total", {{"reason", kRefusalNames[i]}}, static_cast<double>(refused[i]));
    counter("xtimer_collector_hang_episodes_total", "Hang episodes (from the first rank reporting a hang until none does)",
            {}, c.hang_episodes);
    counter("xtimer_collector_dump_rounds_total", "Dump rounds started", {}, c.dump_rounds);
    counter("xtimer_collector_dump_rounds_timed_out_total", "Dump rounds finished at the deadline with ranks missing", {},
            c.dump_rounds_timed_out);
    counter("xtimer_collector_dump_commands_total", "DUMP commands sent to agents", {}, c.dump_commands_sent);
    counter("xtimer_collector_dump_commands_held_total",
            "DUMP commands that told the agent to hold its stacks until an UPLOAD (the upload window was full)", {},
            c.dump_commands_held);
    counter("xtimer_collector_upload_commands_total", "UPLOAD commands: an agent holding a round's stacks may send them",
            {}, c.upload_commands_sent);
  }

  // Under mu.
  nlohmann::json RoundsJson(double now) const {
    using J = nlohmann::json;
    J rounds_j = J::array();
    for (const auto& r : rounds) {
      const RoundInfo& i = r->info;
      J x = {{"name", i.name},
             {"dump_id", i.dump_id},
             {"hang_time", IsoUtcMs(i.hang_unix_ms)},
             {"trigger", i.trigger},
             {"world_size", i.world_size},
             {"finished", i.finished}};
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
        std::lock_guard<std::mutex> rl(r->mu);
        x["received"] = r->have.size();
        x["deadline_in_s"] = std::max(0.0, std::round((r->deadline_s - now) * 10) / 10);
      }
      rounds_j.push_back(std::move(x));
    }
    return rounds_j;
  }

  nlohmann::json Status() const {
    using J = nlohmann::json;
    const double now = Now();
    J j;
    std::unique_lock<std::mutex> lock(mu);
    j["format"] = "xtimer-collector-status";
    j["version"] = 1;
    j["time"] = IsoUtcMs(opt.wall_ms());
    j["world_size"] = world;
    j["ranks_known"] = ranks.size();
    size_t connected = 0;
    for (const auto& [id, s] : sessions) connected += s.connected;
    j["agents_connected"] = connected;
    j["sessions"] = sessions.size();
    j["hang_active"] = episode_active;
    j["dump_wait_s"] = opt.dump_wait_s;
    // The ranks are copied under the lock and turned into JSON after it (10,000 ranks would
    // hold Report calls up for the whole build).
    struct Row {
      int32_t rank;
      bool reported;
      double age;
      int64_t wall;
      v1::RankReport report;  // without its ops
    };
    std::vector<Row> rows;
    rows.reserve(ranks.size());
    for (const auto& [rank, e] : ranks) {
      Row& r = rows.emplace_back(Row{rank, e.reported, now - e.last_seen_s, e.last_seen_wall_ms, {}});
      *r.report.mutable_rank() = e.report.rank();
      r.report.set_state(e.report.state());
      r.report.set_oldest_inflight_s(e.report.oldest_inflight_s());
      r.report.set_oldest_inflight_op(e.report.oldest_inflight_op());
      r.report.set_trigger(e.report.trigger());
      r.report.set_dumps(e.report.dumps());
      r.report.set_exit_code(e.report.exit_code());
    }
    j["rounds"] = RoundsJson(now);
    CoreCounters c = CountersLocked();
    j["counters"] = {{"report_calls", c.report_calls},
                     {"rank_reports", c.rank_reports},
                     {"uploads_accepted", c.uploads_accepted},
                     {"uploads_duplicate", c.uploads_duplicate},
                     {"uploads_refused", c.uploads_refused},
                     {"hang_episodes", c.hang_episodes},
                     {"dump_rounds", c.dump_rounds}};
    lock.unlock();

    std::map<std::string, std::vector<int32_t>> by_state;
    J rs = J::array();
    for (const Row& row : rows) {
      const v1::RankReport& rep = row.report;
      bool stale = !row.reported || row.age > opt.stale_after_s;
      std::string state = row.reported ? StateName(rep.state()) : "registered";
      by_state[stale && row.reported && rep.state() != v1::RANK_STATE_EXITED ? "stale" : state].push_back(row.rank);
      J r = {{"rank", row.rank},
             {"host", rep.rank().host()},
             {"local_rank", rep.rank().local_rank()},
             {"pid", rep.rank().pid()},
             {"state", state},
             {"stale", stale}};
      if (row.reported) {
        r["last_report"] = IsoUtcMs(row.wall);
        r["last_report_age_s"] = std::round(row.age * 10) / 10;
        r["oldest_inflight_s"] = rep.oldest_inflight_s();
        r["oldest_inflight_op"] = rep.oldest_inflight_op();
        r["trigger"] = rep.trigger();
        r["dumps"] = rep.dumps();
        if (rep.state() == v1::RANK_STATE_EXITED) r["exit_code"] = rep.exit_code();
      }
      rs.push_back(std::move(r));
    }
    J states = J::object();
    for (auto& [state, list] : by_state) states[state] = {{"count", list.size()}, {"ranks", RankSet(list).Fold(32)}};
    j["states"] = states;
    j["ranks"] = std::move(rs);
    return j;
  }
};

// ---------------------------------------------------------------------------------------------

std::string RenderStatusPage(const nlohmann::json& status, std::string_view link_prefix);  // status_page.cc

CollectorCore::CollectorCore(CoreOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
CollectorCore::~CollectorCore() = default;

std::string CollectorCore::Register(const v1::RegisterRequest& request, SendCommand send, std::string* error) {
  return impl_->Register(request, std::move(send), error);
}

void CollectorCore::Disconnect(const std::string& session) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->sessions.find(session);
  if (it == impl_->sessions.end()) return;
  it->second.connected = false;
  it->second.send = nullptr;
  it->second.last_seen_s = impl_->Now();
}

bool CollectorCore::HasSession(const std::string& session) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->sessions.contains(session);
}

bool CollectorCore::Report(const v1::ReportRequest& request, v1::Command* reply_command) {
  return impl_->Report(request, reply_command);
}
v1::UploadReply CollectorCore::Upload(const v1::StackUpload& upload) { return impl_->Upload(upload); }
void CollectorCore::Tick() { impl_->Tick(false); }
void CollectorCore::FinishRounds() { impl_->Tick(true); }

std::string CollectorCore::MetricsText() const {
  PrometheusText t;
  AppendMetrics(&t);
  return t.Text();
}

void CollectorCore::AppendMetrics(PrometheusText* out) const { impl_->AppendMetrics(out); }

std::string CollectorCore::StatusJson() const {
  return impl_->Status().dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string CollectorCore::StatusPageHtml(std::string_view round_link_prefix) const {
  return RenderStatusPage(impl_->Status(), round_link_prefix);
}

std::vector<RoundInfo> CollectorCore::Rounds() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<RoundInfo> out;
  for (const auto& r : impl_->rounds) {
    out.push_back(r->info);
    if (!out.back().finished) {
      std::lock_guard<std::mutex> rl(r->mu);
      out.back().reported_count = r->have.size();
    }
  }
  return out;
}

std::optional<std::string> CollectorCore::RoundFile(std::string_view name, std::string_view file) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (const auto& r : impl_->rounds)
    if (r->info.finished && r->name == name && r->dir_ok && r->files.contains(std::string(file)))
      return r->dir + "/" + std::string(file);
  return std::nullopt;
}

CoreCounters CollectorCore::Counters() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->CountersLocked();
}

size_t CollectorCore::SessionsConnected() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  size_t n = 0;
  for (const auto& [id, s] : impl_->sessions) n += s.connected;
  return n;
}

}  // namespace xtimer::collector
