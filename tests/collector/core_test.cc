// Unit tests of the collector core (collector/collector_core.h): dump rounds started by a hang,
// completed by uploads or by the deadline, restarts, episodes, refusals, what gets written.
#include <glob.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "collector/collector_core.h"
#include "common/env.h"
#include "tests/viewer/stack_json.h"

namespace xtimer::collector {
namespace {

namespace fs = std::filesystem;
using testing::Collective;
using testing::MakeRank;
using testing::Native;
using testing::Py;
using testing::StackFileToJson;

// A fresh folder under the build tree's temp area, removed at the end.
class TempDir {
 public:
  TempDir() {
    std::string t = (fs::temp_directory_path() / "xtimer-collector-test-XXXXXX").string();
    path_ = mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A job stuck behind one rank: 8 ranks on 2 nodes; rank 5 stalls in Python (load_batch), the others wait
// in ncclAllReduce #1234.
StackFile RankOf8(int32_t r, int32_t world = 8) {
  StackFile f;
  if (r == 5) {
    f = MakeRank(
        r, world,
        {Py("<module>", "/job/train.py", 160), Py("train_step", "/job/train.py", 140),
         Py("load_batch", "/job/train.py", 88)},
        {Native("_start", "/usr/bin/python3.11"), Native("clock_nanosleep", "/usr/lib/x86_64-linux-gnu/libc.so.6")});
  } else {
    f = MakeRank(r, world,
                 {Py("<module>", "/job/train.py", 160), Py("train_step", "/job/train.py", 142),
                  Py("all_reduce", "/job/c10d.py", 2050)},
                 {Native("_start", "/usr/bin/python3.11"), Native("ncclAllReduce", "/usr/lib/libnccl.so.2")},
                 {Collective("3a9f0c12", 1234, world)});
  }
  f.host = r < 4 ? "node-a" : "node-b";
  return f;
}

std::string StackJson(int32_t r, int32_t world = 8) { return StackFileToJson(RankOf8(r, world)); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::set<std::string> Listing(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// Two agents of 4 ranks each, a fake clock, and a record of the DUMP commands each got.
class CoreTest : public ::testing::Test {
 protected:
  void SetUp() override { MakeCore(); }

  void MakeCore(double dump_wait_s = 30, size_t upload_window = 16) {
    CoreOptions o;
    o.out_dir = dir_.path() + "/out";
    o.dump_wait_s = dump_wait_s;
    o.upload_window = upload_window;
    o.monotonic_s = [this] { return now_; };
    o.wall_ms = [this] { return wall_ms_ + static_cast<int64_t>(now_ * 1000); };
    o.output_formats = 1 | 2;  // svg + folded: Graphviz is slow and not what these tests check
    core_ = std::make_unique<CollectorCore>(o);
  }

  std::string Register(const std::string& node, const std::string& agent_id, int first_rank) {
    v1::RegisterRequest req;
    req.set_protocol_version(1);
    req.set_node(node);
    req.set_agent_id(agent_id);
    for (int r = first_rank; r < first_rank + 4; ++r) *req.add_ranks() = RankMsg(r);
    std::string error;
    std::string s = core_->Register(
        req,
        [this, node](const v1::Command& c) {
          std::lock_guard<std::mutex> lock(mu_);
          commands_[node].push_back(c);
        },
        &error);
    EXPECT_FALSE(s.empty()) << error;
    return s;
  }

  static v1::Rank RankMsg(int r, int world = 8) {
    v1::Rank m;
    m.set_rank(r);
    m.set_local_rank(r % 4);
    m.set_world_size(world);
    m.set_host(r < 4 ? "node-a" : "node-b");
    m.set_pid(1000 + r);
    return m;
  }

  // Reports ranks [first, first+4) of a session; `hung` ranks say RANK_STATE_HUNG. With
  // `reply`, a DUMP for the session comes back there (as in the gRPC reply).
  bool Report(const std::string& session, int first, std::set<int> hung = {}, v1::Command* reply = nullptr,
              int world = 8) {
    v1::ReportRequest req;
    req.set_session(session);
    for (int r = first; r < first + 4; ++r) {
      v1::RankReport* rr = req.add_reports();
      *rr->mutable_rank() = RankMsg(r, world);
      rr->set_time_unix_ms(wall_ms_ + static_cast<int64_t>(now_ * 1000));
      rr->set_state(hung.contains(r) ? v1::RANK_STATE_HUNG : v1::RANK_STATE_RUNNING);
      if (hung.contains(r)) rr->set_trigger("ncclAllReduce #1234 on comm 3a9f0c12 running for 302.1 s");
      v1::OpStat* op = rr->add_ops();
      op->set_name("ncclAllReduce");
      op->set_kind("collective");
      op->set_count(100);
      op->set_p50_us(900);
      op->set_p99_us(2000);
      op->set_total_ms(95);
      op->set_busbw_gbps(80);
      op->set_bytes(1 << 20);
      op->set_comm("3a9f0c12");
    }
    return core_->Report(req, reply);
  }

  v1::UploadReply Upload(const std::string& session, const std::string& dump_id, int32_t rank, std::string json) {
    v1::StackUpload u;
    u.set_session(session);
    u.set_dump_id(dump_id);
    u.set_rank(rank);
    u.set_stack_json(std::move(json));
    return core_->Upload(u);
  }

  // The dump ids of the DUMP commands the node's agent got.
  std::vector<std::string> DumpsOf(const std::string& node) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> ids;
    for (const v1::Command& c : commands_[node])
      if (c.kind() == v1::Command::DUMP) ids.push_back(c.dump_id());
    return ids;
  }

  std::vector<v1::Command> CommandsOf(const std::string& node) {
    std::lock_guard<std::mutex> lock(mu_);
    return commands_[node];
  }

  // Registers both agents, reports everything running, then rank 5 hung. Returns the dump id.
  std::string StartHang() {
    a_ = Register("node-a", "agent-a", 0);
    b_ = Register("node-b", "agent-b", 4);
    EXPECT_TRUE(Report(a_, 0));
    EXPECT_TRUE(Report(b_, 4));
    EXPECT_TRUE(DumpsOf("node-a").empty());
    EXPECT_TRUE(Report(a_, 0, {0, 1, 2, 3}));  // the waiting ranks' watchdogs fire
    EXPECT_EQ(DumpsOf("node-a").size(), 1u) << "the agent that reported the hang is asked at once";
    EXPECT_TRUE(DumpsOf("node-b").empty()) << "the other one with its next report, or at the fan-out tick";
    now_ += 0.1;
    core_->Tick();
    auto da = DumpsOf("node-a"), db = DumpsOf("node-b");
    EXPECT_EQ(da.size(), 1u);
    EXPECT_EQ(db.size(), 1u);
    if (da.empty() || db.empty()) return "";
    EXPECT_EQ(da[0], db[0]);
    return da[0];
  }

  void UploadAll(const std::string& id, std::set<int> skip = {}) {
    for (int r = 0; r < 8; ++r) {
      if (skip.contains(r)) continue;
      v1::UploadReply rep = Upload(r < 4 ? a_ : b_, id, r, StackJson(r));
      EXPECT_TRUE(rep.accepted()) << "rank " << r << ": " << rep.reason();
    }
  }

  // Ticks; the newest round must be finished by completeness (not the deadline) with every rank.
  void ExpectRoundCompleteWithEveryRank() {
    core_->Tick();
    RoundInfo r = core_->Rounds()[0];
    ASSERT_TRUE(r.finished);
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.ranks_reported, "0-7");
  }

  nlohmann::json Verdict(const RoundInfo& r) { return nlohmann::json::parse(ReadFile(r.dir + "/verdict.json")); }

  TempDir dir_;
  double now_ = 1000;
  int64_t wall_ms_ = 1795341530000;  // + now_ (1000 s) = 2026-11-22T10:15:30Z
  std::unique_ptr<CollectorCore> core_;
  std::mutex mu_;
  std::map<std::string, std::vector<v1::Command>> commands_;
  std::string a_, b_;
};

// Building the options reads no environment: the caller fills the judge's settings
// (JudgeOptions::FromEnv), and every default is the settings table's (common/env.cc).
TEST(CoreOptionsTest, DefaultsAreTheTablesNotTheEnvironments) {
  setenv("XTIMER_SLOW_WINDOW", "7", 1);
  setenv("XTIMER_DUMP_WAIT", "9", 1);
  CoreOptions o;
  EXPECT_DOUBLE_EQ(o.slowdown.window_s, env::DefaultDouble("XTIMER_SLOW_WINDOW"));
  EXPECT_DOUBLE_EQ(o.dump_wait_s, env::DefaultDouble("XTIMER_DUMP_WAIT"));
  EXPECT_DOUBLE_EQ(slowdown::JudgeOptions::FromEnv().window_s, 7.0);  // the caller's read
  unsetenv("XTIMER_SLOW_WINDOW");
  unsetenv("XTIMER_DUMP_WAIT");
}

TEST_F(CoreTest, HungReportStartsOneRoundAndAsksEveryAgent) {
  std::string id = StartHang();
  ASSERT_FALSE(id.empty());
  for (const char* node : {"node-a", "node-b"})
    EXPECT_FALSE(CommandsOf(node).at(0).wait_for_upload()) << "2 agents, window 16: both upload at once";
  // More hung reports of the same episode start nothing new.
  now_ += 1;
  EXPECT_TRUE(Report(b_, 4, {4, 6, 7}));
  EXPECT_EQ(DumpsOf("node-a").size(), 1u);
  EXPECT_EQ(DumpsOf("node-b").size(), 1u);
  auto rounds = core_->Rounds();
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_FALSE(rounds[0].finished);
  EXPECT_EQ(rounds[0].dump_id, id);
  EXPECT_EQ(rounds[0].world_size, 8);
  EXPECT_NE(rounds[0].trigger.find("rank 0"), std::string::npos) << rounds[0].trigger;
  EXPECT_EQ(core_->Counters().dump_rounds, 1u);
  EXPECT_EQ(core_->Counters().hang_episodes, 1u);
}

// When every rank hangs at once, the DUMPs ride on the replies to the hang reports: the agent
// that started the round, and each that reports before the fan-out tick, get theirs in the reply
// and never a second one on the command stream; a silent agent is asked at the tick 0.1 s on.
TEST_F(CoreTest, DumpsRideOnReportRepliesAndSilentAgentsAreAskedAtTheFanOutTick) {
  a_ = Register("node-a", "agent-a", 0);
  b_ = Register("node-b", "agent-b", 4);
  std::string c = Register("node-c", "agent-c", 0);
  v1::Command ra, rb, again;
  ASSERT_TRUE(Report(a_, 0, {0, 1, 2, 3}, &ra));
  ASSERT_EQ(ra.kind(), v1::Command::DUMP);
  const std::string id = ra.dump_id();
  now_ += 0.05;
  ASSERT_TRUE(Report(b_, 4, {4, 6, 7}, &rb));
  EXPECT_EQ(rb.kind(), v1::Command::DUMP);
  EXPECT_EQ(rb.dump_id(), id);
  core_->Tick();
  EXPECT_TRUE(DumpsOf("node-c").empty()) << "0.05 s after the hang: no fan-out yet";
  now_ += 0.06;
  core_->Tick();
  EXPECT_EQ(DumpsOf("node-c"), std::vector<std::string>{id}) << "the silent agent, at the fan-out tick";
  EXPECT_TRUE(CommandsOf("node-a").empty() && CommandsOf("node-b").empty()) << "asked in their replies, not twice";
  ASSERT_TRUE(Report(b_, 4, {4, 6, 7}, &again));
  EXPECT_EQ(again.kind(), v1::Command::KIND_UNSPECIFIED) << "an agent is asked once per round";
  EXPECT_EQ(core_->Counters().dump_commands_sent, 3u);
}

TEST_F(CoreTest, RoundCompletesWhenEveryRankUploaded) {
  std::string id = StartHang();
  UploadAll(id, {7});
  core_->Tick();
  EXPECT_FALSE(core_->Rounds()[0].finished) << "7 of 8 ranks: the round waits";
  ASSERT_TRUE(Upload(b_, id, 7, StackJson(7)).accepted());
  core_->Tick();  // no time has passed: complete, not timed out
  RoundInfo r = core_->Rounds()[0];
  ASSERT_TRUE(r.finished);
  EXPECT_FALSE(r.timed_out);
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.name, "20261122T101530Z");  // the hung report's time
  EXPECT_EQ(r.dir, dir_.path() + "/out/20261122T101530Z");
  EXPECT_EQ(r.ranks_reported, "0-7");
  EXPECT_EQ(r.ranks_missing, "");
  std::set<std::string> want = {"py_stack.folded", "cpp_stack.folded", "py_stack.svg", "cpp_stack.svg", "verdict.json"};
  for (int k = 0; k < 8; ++k) {
    char n[64];
    std::snprintf(n, sizeof n, "%05d-00008.stacktrace", k);
    want.insert(n);
  }
  EXPECT_EQ(Listing(r.dir), want);
  // The stack file on disk is exactly what was uploaded.
  EXPECT_EQ(ReadFile(r.dir + "/00005-00008.stacktrace"), StackJson(5));
  nlohmann::json v = Verdict(r);
  EXPECT_EQ(v["world_size"], 8);
  ASSERT_GE(v["suspects"].size(), 1u) << v.dump(1);
  EXPECT_EQ(v["suspects"][0]["rank"], 5) << v.dump(1);
  EXPECT_NE(v["suspects"][0].dump().find("load_batch"), std::string::npos) << v.dump(1);
  EXPECT_NE(ReadFile(r.dir + "/py_stack.folded").find("load_batch"), std::string::npos);
  ASSERT_FALSE(r.suspects.empty());
  EXPECT_EQ(r.suspects[0].first, 5);
  // Only finished merge outputs are served, never the stack files or other names.
  EXPECT_EQ(core_->RoundFile(r.name, "py_stack.svg"), r.dir + "/py_stack.svg");
  EXPECT_FALSE(core_->RoundFile(r.name, "00005-00008.stacktrace"));
  EXPECT_FALSE(core_->RoundFile(r.name, "../out"));
  EXPECT_FALSE(core_->RoundFile("..", "verdict.json"));
  // A late copy of stacks the merged round has is a duplicate, not an error.
  v1::UploadReply late = Upload(a_, id, 1, StackJson(1));
  EXPECT_TRUE(late.accepted());
  EXPECT_NE(late.reason().find("is merged and has rank 1"), std::string::npos) << late.reason();
}

TEST_F(CoreTest, DeadlineNamesMissingRanks) {
  std::string id = StartHang();
  UploadAll(id, {3, 6});
  now_ += 29;
  core_->Tick();
  EXPECT_FALSE(core_->Rounds()[0].finished);
  now_ += 1.5;
  core_->Tick();
  RoundInfo r = core_->Rounds()[0];
  ASSERT_TRUE(r.finished);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.ranks_missing, "3/6");
  EXPECT_EQ(r.missing_count, 2u);
  nlohmann::json v = Verdict(r);
  EXPECT_EQ(v["ranks_missing"].dump(), "[3,6]") << v.dump(1);
  std::set<int> suspects;
  for (const auto& s : v["suspects"]) suspects.insert(s["rank"].get<int>());
  EXPECT_TRUE(suspects.contains(3) && suspects.contains(6)) << v.dump(1);
  EXPECT_EQ(core_->Counters().dump_rounds_timed_out, 1u);
  // Too late for the merge: refused with a reason.
  v1::UploadReply late = Upload(a_, id, 3, StackJson(3));
  EXPECT_FALSE(late.accepted());
  EXPECT_NE(late.reason().find("already merged"), std::string::npos) << late.reason();
  EXPECT_NE(core_->MetricsText().find("xtimer_collector_last_round_ranks_missing 2\n"), std::string::npos);
}

// An elastic restart without node-b: node-a's ranks 0-3 now say world size 4. The next hang's
// round is complete with those four; ranks 4-7 of the old world are neither waited for nor
// named missing, and the metrics show the new world.
TEST_F(CoreTest, AfterAShrinkTheOldWorldsRanksAreNotMissing) {
  a_ = Register("node-a", "agent-a", 0);
  b_ = Register("node-b", "agent-b", 4);
  ASSERT_TRUE(Report(a_, 0));
  ASSERT_TRUE(Report(b_, 4));
  EXPECT_NE(core_->MetricsText().find("xtimer_collector_world_size 8\n"), std::string::npos);
  ASSERT_TRUE(Report(a_, 0, {}, nullptr, 4));
  std::string metrics = core_->MetricsText();
  EXPECT_NE(metrics.find("xtimer_collector_world_size 4\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("xtimer_collector_ranks_known 4\n"), std::string::npos) << metrics;
  ASSERT_TRUE(Report(a_, 0, {1}, nullptr, 4));
  auto ids = DumpsOf("node-a");
  ASSERT_EQ(ids.size(), 1u);
  for (int r = 0; r < 4; ++r) {
    v1::UploadReply rep = Upload(a_, ids[0], r, StackJson(r, 4));
    EXPECT_TRUE(rep.accepted()) << "rank " << r << ": " << rep.reason();
  }
  core_->Tick();
  RoundInfo round = core_->Rounds()[0];
  ASSERT_TRUE(round.finished);
  EXPECT_FALSE(round.timed_out) << "the round must not wait for ranks 4-7";
  EXPECT_EQ(round.world_size, 4);
  EXPECT_EQ(round.ranks_reported, "0-3");
  EXPECT_EQ(round.missing_count, 0u);
}

TEST_F(CoreTest, RoundWithNoUploadAtAllStillNamesEveryRankMissing) {
  StartHang();
  now_ += 31;
  core_->Tick();
  RoundInfo r = core_->Rounds()[0];
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.ranks_missing, "0-7");
  EXPECT_EQ(r.reported_count, 0u);
}

TEST_F(CoreTest, RestartedCoreAnswersUnknownAndLearnsRanksAgain) {
  std::string id = StartHang();
  std::string old_a = a_;
  MakeCore();  // the collector restarted
  EXPECT_FALSE(Report(old_a, 0));
  EXPECT_FALSE(core_->HasSession(old_a));
  v1::UploadReply u = Upload(old_a, id, 0, StackJson(0));
  EXPECT_FALSE(u.accepted());
  EXPECT_NE(u.reason().find("register again"), std::string::npos) << u.reason();
  EXPECT_EQ(nlohmann::json::parse(core_->StatusJson())["ranks"].size(), 0u)
      << "reports of unknown sessions teach nothing";
  // The agent registers again; its next reports are learned, and the hang (still on) is merged.
  a_ = Register("node-a", "agent-a", 0);
  b_ = Register("node-b", "agent-b", 4);
  EXPECT_TRUE(Report(b_, 4));
  nlohmann::json st = nlohmann::json::parse(core_->StatusJson());
  EXPECT_EQ(st["world_size"], 8);
  EXPECT_EQ(st["ranks"].size(), 8u);  // 4 reported, 4 known from the registration
  EXPECT_EQ(st["states"]["running"]["ranks"], "4-7") << st.dump(1);
  EXPECT_TRUE(Report(a_, 0, {0, 1, 2, 3}));
  ASSERT_EQ(core_->Rounds().size(), 1u);
  EXPECT_NE(core_->Rounds()[0].dump_id, id);
}

TEST_F(CoreTest, TwoEpisodesMakeTwoRounds) {
  std::string id1 = StartHang();
  UploadAll(id1);
  core_->Tick();
  // Every rank runs again: the episode ends (checked once a second).
  now_ += 2;
  Report(a_, 0);
  Report(b_, 4);
  core_->Tick();
  now_ += 0.5;
  Report(b_, 4, {5});
  EXPECT_EQ(DumpsOf("node-b").size(), 2u) << "the agent that reported the hang is asked at once";
  now_ += 0.1;
  core_->Tick();
  auto da = DumpsOf("node-a");
  ASSERT_EQ(da.size(), 2u);
  ASSERT_NE(da[1], id1);
  UploadAll(da[1]);
  core_->Tick();
  auto rounds = core_->Rounds();
  ASSERT_EQ(rounds.size(), 2u);
  EXPECT_TRUE(rounds[0].finished && rounds[1].finished);
  EXPECT_NE(rounds[0].dir, rounds[1].dir);
  EXPECT_EQ(rounds[1].name, "20261122T101530Z");
  EXPECT_EQ(rounds[0].name, "20261122T101532Z");
  EXPECT_TRUE(fs::exists(rounds[0].dir + "/verdict.json"));
  EXPECT_TRUE(fs::exists(rounds[1].dir + "/verdict.json"));
  EXPECT_EQ(core_->Counters().hang_episodes, 2u);
}

TEST_F(CoreTest, SilentHungRanksEndTheEpisode) {
  std::string id1 = StartHang();
  UploadAll(id1);
  core_->Tick();
  // Nobody reports for a minute (the agents are gone): their hang no longer holds the episode.
  now_ += 30;
  core_->Tick();
  Report(b_, 4);  // node-b's ranks run; node-a's (0-3, hung) go silent
  EXPECT_EQ(DumpsOf("node-b").size(), 1u);
  core_->Tick();
  Report(b_, 4, {6});
  EXPECT_EQ(DumpsOf("node-b").size(), 1u) << "30 s: ranks 0-3 still count as hung, same episode";
  Report(b_, 4);
  now_ += 31;
  core_->Tick();
  Report(b_, 4, {7});
  EXPECT_EQ(DumpsOf("node-b").size(), 2u) << "ranks 0-3 silent for 61 s: a new episode";
  EXPECT_EQ(core_->Counters().hang_episodes, 2u);
}

TEST_F(CoreTest, TwoRoundsInOneSecondGetTwoFolders) {
  std::string id1 = StartHang();
  now_ += 1.2;
  Report(a_, 0);
  Report(b_, 4);
  core_->Tick();     // episode over, first round still collecting
  wall_ms_ -= 1200;  // same wall second as the first hang
  Report(b_, 4, {6});
  auto rounds = core_->Rounds();
  ASSERT_EQ(rounds.size(), 2u);
  EXPECT_EQ(rounds[1].name, "20261122T101530Z");
  EXPECT_EQ(rounds[0].name, "20261122T101530Z-2");
  EXPECT_TRUE(fs::is_directory(rounds[0].dir));
}

TEST_F(CoreTest, BadUploadsAreRefusedWithAReason) {
  std::string id = StartHang();
  auto refused = [&](const std::string& session, const std::string& dump, int rank, const std::string& json,
                     const std::string& why) {
    v1::UploadReply r = Upload(session, dump, rank, json);
    EXPECT_FALSE(r.accepted()) << why;
    EXPECT_NE(r.reason().find(why), std::string::npos) << "want '" << why << "' in: " << r.reason();
    EXPECT_EQ(r.reason().find('\n'), std::string::npos) << "one line";
  };
  refused(a_, id, 0, "{not json", "not a usable stack file");
  refused(a_, id, 0, "", "not a usable stack file");
  std::string other_format = StackJson(0);
  other_format.replace(other_format.find("xtimer-stacktrace"), 17, "something-else");
  refused(a_, id, 0, other_format, "not a usable stack file");
  std::string newer = StackJson(0);
  newer.replace(newer.find("\"version\":1"), 11, "\"version\":99");
  refused(a_, id, 0, newer, "not a usable stack file");
  refused(a_, id, 1, StackJson(0), "the stack file is rank 0's, the upload says rank 1");
  refused(a_, id, -3, StackJson(0), "outside");
  refused(a_, id, 0, StackJson(0, 16), "world size 16");
  refused(a_, "deadbeef", 0, StackJson(0), "unknown dump round");
  refused("no-such-session", id, 0, StackJson(0), "unknown session");
  {
    CoreOptions o;
    o.out_dir = dir_.path() + "/small";
    o.max_stack_bytes = 100;
    CollectorCore small(o);
    v1::RegisterRequest rr;
    rr.set_protocol_version(1);
    std::string s = small.Register(rr, nullptr);
    v1::StackUpload u;
    u.set_session(s);
    u.set_rank(0);
    u.set_stack_json(StackJson(0));
    v1::UploadReply r = small.Upload(u);
    EXPECT_FALSE(r.accepted());
    EXPECT_NE(r.reason().find("larger than the limit of 100"), std::string::npos) << r.reason();
  }
  // The good uploads still make a complete round, with the refused rank-0 attempts listed.
  UploadAll(id);
  core_->Tick();
  RoundInfo r = core_->Rounds()[0];
  ASSERT_TRUE(r.finished);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.ranks_missing, "");
  nlohmann::json v = Verdict(r);
  EXPECT_GE(v["skipped"].size(), 3u) << v.dump(1);
  EXPECT_GE(core_->Counters().uploads_refused, 9u);
  std::string m = core_->MetricsText();
  EXPECT_NE(m.find("xtimer_collector_uploads_refused_total{reason=\"parse\"} 4\n"), std::string::npos) << m;
  EXPECT_NE(m.find("xtimer_collector_uploads_refused_total{reason=\"rank_mismatch\"} 1\n"), std::string::npos);
  EXPECT_NE(m.find("xtimer_collector_uploads_refused_total{reason=\"unknown_round\"} 1\n"), std::string::npos);
}

TEST_F(CoreTest, DuplicateUploadKeepsTheFirst) {
  std::string id = StartHang();
  ASSERT_TRUE(Upload(b_, id, 5, StackJson(5)).accepted());
  v1::UploadReply again = Upload(b_, id, 5, StackJson(4).replace(StackJson(4).find("\"rank\":4"), 8, "\"rank\":5"));
  EXPECT_TRUE(again.accepted());
  EXPECT_NE(again.reason().find("kept the first"), std::string::npos) << again.reason();
  UploadAll(id, {5});
  core_->Tick();
  RoundInfo r = core_->Rounds()[0];
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(ReadFile(r.dir + "/00005-00008.stacktrace"), StackJson(5));
  EXPECT_EQ(core_->Counters().uploads_duplicate, 1u);
}

TEST_F(CoreTest, OwnDumpsJoinTheRound) {
  a_ = Register("node-a", "agent-a", 0);
  b_ = Register("node-b", "agent-b", 4);
  Report(a_, 0);
  Report(b_, 4);
  // Rank 0's watchdog fired: its own dump arrives before its hang report.
  v1::UploadReply own = Upload(a_, "", 0, StackJson(0));
  EXPECT_TRUE(own.accepted()) << own.reason();
  now_ += 2;
  Report(a_, 0, {0});
  std::string id = DumpsOf("node-a").at(0);
  // And one that arrives during the round.
  EXPECT_TRUE(Upload(a_, "", 1, StackJson(1)).accepted());
  core_->Tick();  // takes in rank 0's dump
  for (int r = 2; r < 8; ++r) ASSERT_TRUE(Upload(r < 4 ? a_ : b_, id, r, StackJson(r)).accepted());
  ExpectRoundCompleteWithEveryRank();
}

TEST_F(CoreTest, OldOwnDumpsDoNotJoin) {
  a_ = Register("node-a", "agent-a", 0);
  b_ = Register("node-b", "agent-b", 4);
  Report(a_, 0);
  Report(b_, 4);
  EXPECT_TRUE(Upload(a_, "", 0, StackJson(0)).accepted());
  now_ += 100;  // long before the hang
  core_->Tick();
  Report(a_, 0, {1});
  now_ += 31;
  core_->Tick();
  core_->Tick();
  EXPECT_EQ(core_->Rounds()[0].ranks_missing, "0-7");
}

TEST_F(CoreTest, AgentRegisteringDuringARoundIsAsked) {
  std::string id = StartHang();
  // node-b's agent reconnects (same agent id): its new session gets the DUMP at once.
  std::string b2 = Register("node-b", "agent-b", 4);
  auto db = DumpsOf("node-b");
  ASSERT_EQ(db.size(), 2u);
  EXPECT_EQ(db[1], id);
  EXPECT_FALSE(core_->HasSession(b_)) << "the reconnect replaced the old session";
  EXPECT_TRUE(core_->HasSession(b2));
}

// Upload pacing (window 1 of 2 agents): both agents are asked to dump (StartHang), one uploads,
// the other holds its stacks until the first has sent all its ranks, then gets UPLOAD.
TEST_F(CoreTest, UploadsArePacedByTheWindow) {
  MakeCore(30, 1);
  std::string id = StartHang();
  auto ca = CommandsOf("node-a"), cb = CommandsOf("node-b");
  ASSERT_EQ(ca.size(), 1u);
  ASSERT_EQ(cb.size(), 1u);
  ASSERT_NE(ca[0].wait_for_upload(), cb[0].wait_for_upload()) << "exactly one agent may upload at once";
  bool a_first = !ca[0].wait_for_upload();
  std::string first = a_first ? a_ : b_, second = a_first ? b_ : a_;
  std::string second_node = a_first ? "node-b" : "node-a";
  int first_rank = a_first ? 0 : 4, second_rank = a_first ? 4 : 0;
  for (int r = first_rank; r < first_rank + 3; ++r) ASSERT_TRUE(Upload(first, id, r, StackJson(r)).accepted());
  core_->Tick();
  EXPECT_EQ(CommandsOf(second_node).size(), 1u) << "the first agent has a rank left to send";
  ASSERT_TRUE(Upload(first, id, first_rank + 3, StackJson(first_rank + 3)).accepted());
  auto c2 = CommandsOf(second_node);
  ASSERT_EQ(c2.size(), 2u) << "granted by the upload that completed the first agent, not by a tick";
  EXPECT_EQ(c2[1].kind(), v1::Command::UPLOAD);
  EXPECT_EQ(c2[1].dump_id(), id);
  EXPECT_EQ(core_->Counters().upload_commands_sent, 1u);
  EXPECT_EQ(core_->Counters().dump_commands_sent, 2u);
  EXPECT_NE(core_->MetricsText().find("xtimer_collector_upload_commands_total 1\n"), std::string::npos);
  for (int r = second_rank; r < second_rank + 4; ++r) ASSERT_TRUE(Upload(second, id, r, StackJson(r)).accepted());
  ExpectRoundCompleteWithEveryRank();
}

// An agent that sends nothing (or goes away) does not hold the window; one arriving mid-round
// takes its turn after those already waiting.
TEST_F(CoreTest, SilentOrGoneAgentsLeaveTheWindow) {
  MakeCore(30, 1);
  std::string id = StartHang();
  bool a_first = !CommandsOf("node-a")[0].wait_for_upload();
  std::string first = a_first ? a_ : b_;
  std::string second_node = a_first ? "node-b" : "node-a";
  std::string c = Register("node-c", "agent-c", 0);
  auto cc = CommandsOf("node-c");
  ASSERT_EQ(cc.size(), 1u);
  EXPECT_EQ(cc[0].kind(), v1::Command::DUMP);
  EXPECT_TRUE(cc[0].wait_for_upload()) << "the window is full";
  now_ += 1.8;  // StartHang's fan-out tick came 0.1 s after the first agent's grant
  core_->Tick();
  EXPECT_EQ(CommandsOf(second_node).size(), 1u) << "1.9 s of silence: still its turn";
  now_ += 0.2;
  core_->Tick();
  ASSERT_EQ(CommandsOf(second_node).size(), 2u) << "2.1 s of silence: the next agent's turn";
  EXPECT_EQ(CommandsOf(second_node)[1].kind(), v1::Command::UPLOAD);
  EXPECT_EQ(CommandsOf("node-c").size(), 1u);
  core_->Disconnect(a_first ? b_ : a_);  // the agent now uploading goes away
  core_->Tick();
  ASSERT_EQ(CommandsOf("node-c").size(), 2u);
  EXPECT_EQ(CommandsOf("node-c")[1].kind(), v1::Command::UPLOAD);
  EXPECT_EQ(CommandsOf("node-c")[1].dump_id(), id);
  // Uploads outside the window are still taken: pacing is a request, not a gate.
  EXPECT_TRUE(Upload(first, id, a_first ? 0 : 4, StackJson(a_first ? 0 : 4)).accepted());
}

// A round that reaches its deadline with agents still waiting for their turn says so.
TEST_F(CoreTest, RoundEndingWithAgentsNeverToldToUploadIsLogged) {
  MakeCore(5, 1);
  ::testing::internal::CaptureStderr();  // Log() writes to fd 2
  StartHang();
  now_ += 1;
  core_->Tick();  // the first agent keeps its turn: 1 s of silence
  now_ += 4.5;
  core_->Tick();  // deadline: merged with the other agent still waiting
  std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(core_->Rounds()[0].finished);
  EXPECT_NE(log.find("ends with 1 agents still waiting for their turn to upload; raise --upload-window (now 1)"),
            std::string::npos)
      << log;
}

// Window 0 (the node agent's embedded core): every agent uploads at once, no UPLOAD commands.
TEST_F(CoreTest, WindowZeroDoesNotPace) {
  MakeCore(30, 0);
  std::string id = StartHang();
  for (const char* node : {"node-a", "node-b"}) {
    auto c = CommandsOf(node);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_FALSE(c[0].wait_for_upload());
  }
  UploadAll(id);
  core_->Tick();
  EXPECT_TRUE(core_->Rounds()[0].finished);
  EXPECT_EQ(core_->Counters().upload_commands_sent, 0u);
}

TEST_F(CoreTest, DisconnectedAgentsAreNotAskedAndAreForgottenWhenIdle) {
  a_ = Register("node-a", "agent-a", 0);
  b_ = Register("node-b", "agent-b", 4);
  core_->Disconnect(b_);
  EXPECT_EQ(core_->SessionsConnected(), 1u);
  Report(a_, 0, {2});
  EXPECT_EQ(DumpsOf("node-a").size(), 1u);
  EXPECT_EQ(DumpsOf("node-b").size(), 0u);
  EXPECT_TRUE(core_->HasSession(b_)) << "uploads in flight still count";
  now_ += 301;
  core_->Tick();
  EXPECT_FALSE(core_->HasSession(b_));
  EXPECT_TRUE(core_->HasSession(a_)) << "a connected session never expires";
}

TEST_F(CoreTest, NonsenseReportsAndRegistrationsAreDropped) {
  v1::RegisterRequest bad;
  bad.set_protocol_version(2);
  std::string error;
  EXPECT_EQ(core_->Register(bad, nullptr, &error), "");
  EXPECT_NE(error.find("protocol version 2"), std::string::npos) << error;
  a_ = Register("node-a", "agent-a", 0);
  v1::ReportRequest req;
  req.set_session(a_);
  auto add = [&](int rank, int world) {
    v1::RankReport* r = req.add_reports();
    r->mutable_rank()->set_rank(rank);
    r->mutable_rank()->set_world_size(world);
    r->set_state(v1::RANK_STATE_HUNG);
  };
  add(8, 8);
  add(-1, 8);
  add(0, (1 << 20) + 1);
  add(0, 0);
  EXPECT_TRUE(core_->Report(req));
  EXPECT_TRUE(core_->Rounds().empty()) << "no valid report, no round";
  EXPECT_EQ(core_->Counters().rank_reports_invalid, 4u);
}

TEST_F(CoreTest, StateOnlyReportKeepsOpStatistics) {
  a_ = Register("node-a", "agent-a", 0);
  Report(a_, 0);
  v1::ReportRequest req;
  req.set_session(a_);
  v1::RankReport* r = req.add_reports();
  *r->mutable_rank() = RankMsg(2);
  r->set_state(v1::RANK_STATE_HUNG);
  r->set_oldest_inflight_s(301.5);
  r->set_oldest_inflight_op("ncclAllReduce");
  ASSERT_TRUE(core_->Report(req));
  std::string m = core_->MetricsText();
  EXPECT_NE(m.find("xtimer_rank_hung{rank=\"2\",host=\"node-a\"} 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("xtimer_rank_inflight_oldest_seconds{rank=\"2\",host=\"node-a\"} 301.5\n"), std::string::npos);
  EXPECT_NE(m.find("xtimer_op_latency_seconds_count{rank=\"2\",kind=\"collective\",op=\"ncclAllReduce\""),
            std::string::npos)
      << "the ops of the last full report stay";
}

TEST_F(CoreTest, MetricsCoverRanksAndTheCollector) {
  std::string id = StartHang();
  UploadAll(id);
  core_->Tick();
  std::string m = core_->MetricsText();
  for (const char* want : {
           "# TYPE xtimer_op_latency_seconds summary\n",
           "xtimer_op_latency_seconds{rank=\"5\",kind=\"collective\",op=\"ncclAllReduce\",detail=\"1048576B comm "
           "3a9f0c12\",quantile=\"0.99\"} 0.002\n",
           "xtimer_op_busbw_gbps{rank=\"7\",",
           "xtimer_rank_hung{rank=\"0\",host=\"node-a\"} 1\n",
           "xtimer_rank_hung{rank=\"5\",host=\"node-b\"} 0\n",
           "xtimer_rank_report_age_seconds{rank=\"7\",host=\"node-b\"} 0.1\n",  // StartHang's fan-out tick
           "xtimer_collector_agents_connected 2\n",
           "xtimer_collector_world_size 8\n",
           "xtimer_collector_rank_reports_total{result=\"ok\"} 12\n",
           "xtimer_collector_uploads_total{result=\"accepted\"} 8\n",
           "xtimer_collector_dump_rounds_total 1\n",
           "xtimer_collector_hang_active 1\n",
       })
    EXPECT_NE(m.find(want), std::string::npos) << "missing: " << want << "\n" << m;
}

TEST_F(CoreTest, FilesAreNamedByTheCollectorNeverByClients) {
  std::string id = StartHang();
  for (int r = 0; r < 8; ++r) {
    StackFile f = RankOf8(r);
    f.host = "../../../../tmp/evil";
    f.reason = "../x";
    ASSERT_TRUE(Upload(r < 4 ? a_ : b_, id, r, StackFileToJson(f)).accepted());
  }
  core_->Tick();
  RoundInfo r = core_->Rounds()[0];
  for (const auto& e : fs::recursive_directory_iterator(dir_.path())) {
    std::string rel = fs::relative(e.path(), dir_.path()).string();
    EXPECT_EQ(rel.find("evil"), std::string::npos) << rel;
    EXPECT_TRUE(rel == "out" || rel.rfind("out/20261122T101530Z", 0) == 0) << rel;
  }
}

TEST_F(CoreTest, PageEscapesAgentStrings) {
  v1::RegisterRequest req;
  req.set_protocol_version(1);
  req.set_node("<b>node</b>");
  std::string s = core_->Register(req, nullptr);
  v1::ReportRequest rep;
  rep.set_session(s);
  v1::RankReport* r = rep.add_reports();
  r->mutable_rank()->set_rank(0);
  r->mutable_rank()->set_world_size(1);
  r->mutable_rank()->set_host("<script>alert(1)</script>");
  r->set_state(v1::RANK_STATE_HUNG);
  r->set_trigger("x\" onmouseover=\"alert(2)");
  ASSERT_TRUE(core_->Report(rep));
  std::string html = core_->StatusPageHtml();
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_EQ(html.find("\" onmouseover"), std::string::npos);
  EXPECT_NE(html.find("data-rank=\"0\""), std::string::npos);
  // Not UTF-8 either: the JSON still comes out.
  r->mutable_rank()->set_host(std::string("\xff\xfe", 2));
  ASSERT_TRUE(core_->Report(rep));
  EXPECT_NO_THROW(nlohmann::json::parse(core_->StatusJson()));
}

// xtimer_run --evict-slow-nodes tells the collector of a node it evicted (ReportRequest.evictions):
// a row on the page, an entry in the status object, the counter; a retry is kept once, a record
// without a name or with a number that is not finite is dropped and counted; agents' strings are
// escaped on the page.
TEST_F(CoreTest, NodeEvictionsAreListedOnThePageOnce) {
  a_ = Register("node-a", "agent-a", 0);
  v1::NodeEviction e;
  e.set_node("host4-5021-9f2c01");
  e.set_name("node2");
  e.set_round(3);
  e.set_group_rank(2);
  e.set_cause("gpu_compute");
  e.set_scope("node");
  e.set_cost(0.44);
  e.set_since(1795342000.5);
  e.set_named_for_s(10);
  e.set_detail("GEMM bf16 8192x8192x4096 at 0.50x its peers <b>");
  e.set_spares(1);
  e.set_time(1795342010);
  e.set_reason("node node2 (group rank 2) evicted as slow (--evict-slow-nodes): named slow for 10 s");
  v1::ReportRequest req;
  req.set_session(a_);
  *req.add_evictions() = e;
  ASSERT_TRUE(core_->Report(req));
  ASSERT_TRUE(core_->Report(req));  // the agent's retry: kept once
  v1::NodeEviction bad = e;
  bad.set_name("");
  v1::NodeEviction nan = e;
  nan.set_name("node3");
  nan.set_cost(std::nan(""));
  req.clear_evictions();
  *req.add_evictions() = bad;
  *req.add_evictions() = nan;
  ASSERT_TRUE(core_->Report(req));

  nlohmann::json st = nlohmann::json::parse(core_->StatusJson());
  ASSERT_EQ(st["evictions"].size(), 1u) << st["evictions"].dump();
  const nlohmann::json& j = st["evictions"][0];
  EXPECT_EQ(j["name"], "node2");
  EXPECT_EQ(j["node"], "host4-5021-9f2c01");
  EXPECT_EQ(j["round"], 3);
  EXPECT_EQ(j["cause"], "gpu_compute");
  EXPECT_EQ(j["scope"], "node");
  EXPECT_DOUBLE_EQ(j["cost"].get<double>(), 0.44);
  EXPECT_EQ(j["reason"], e.reason());
  EXPECT_EQ(st["counters"]["node_evictions"], 1);

  std::string html = core_->StatusPageHtml();
  size_t row = html.find("<tr class=\"slow\" data-node=\"node2\">");
  ASSERT_NE(row, std::string::npos) << html;
  std::string tr = html.substr(row, html.find("</tr>", row) - row);
  for (const char* want : {"node2 (host4-5021-9f2c01)", "<td>3</td>", "gpu_compute", "<td>44%</td>",
                           "2026-11-22 10:06:50Z", "2026-11-22 10:06:40Z", "named slow for 10 s"})
    EXPECT_NE(tr.find(want), std::string::npos) << "missing " << want << " in " << tr;
  EXPECT_NE(html.find("id=\"evictions\""), std::string::npos);
  EXPECT_EQ(html.find("<b>"), std::string::npos);

  std::string m = core_->MetricsText();
  EXPECT_NE(m.find("xtimer_collector_slow_node_evictions_total{result=\"ok\"} 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("xtimer_collector_slow_node_evictions_total{result=\"invalid\"} 2\n"), std::string::npos) << m;
}

TEST_F(CoreTest, FinishRoundsMergesWhatIsThere) {
  std::string id = StartHang();
  UploadAll(id, {1});
  core_->FinishRounds();
  RoundInfo r = core_->Rounds()[0];
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.ranks_missing, "1");
}

// Many threads at once: reports, uploads, ticks and readers (TSan runs this).
TEST_F(CoreTest, ConcurrentCallers) {
  std::string id = StartHang();
  std::vector<std::thread> threads;
  std::atomic<int> accepted{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        Report(t % 2 ? b_ : a_, t % 2 ? 4 : 0, {});
        if (i % 10 == 0) (void)core_->MetricsText(), (void)core_->StatusJson(), (void)core_->StatusPageHtml();
      }
      for (int r = t; r < 8; r += 4)
        if (Upload(r < 4 ? a_ : b_, id, r, StackJson(r)).accepted()) ++accepted;
    });
  threads.emplace_back([&] {
    for (int i = 0; i < 100; ++i) core_->Tick();
  });
  for (auto& th : threads) th.join();
  core_->Tick();
  EXPECT_EQ(accepted, 8);
  RoundInfo r = core_->Rounds()[0];
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.ranks_reported, "0-7");
}

static std::vector<std::string> Glob(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
  globfree(&g);
  return out;
}

// Ranks out of step across nodes: each agent forwards its ranks' fingerprints with its report;
// the core compares all of them (rank 6 on node b all-reduces half the size of ranks 0-5 and 7),
// writes out/desync-*/verdict.json naming rank 6, and asks every agent for stacks as for a hang.
// Fingerprints that break the rules (a communicator that is not letters and digits, seq 0, a rank
// out of range) are dropped.
TEST_F(CoreTest, OutOfStepAcrossNodesIsADesyncVerdictAndADumpRound) {
  a_ = Register("node-a", "agent-a", 0);
  b_ = Register("node-b", "agent-b", 4);
  auto prints = [&](const std::string& session, int first, bool hostile) {
    v1::ReportRequest req;
    req.set_session(session);
    for (int r = first; r < first + 4; ++r) {
      v1::CallPrint* p = req.add_prints();
      p->set_rank(r);
      p->set_comm("bf12b7af");
      p->set_comm_size(8);
      p->set_seq(1);
      p->set_op("AllReduce");
      p->set_count(r == 6 ? 1 << 17 : 1 << 18);
      p->set_dtype(7);
      p->set_redop(0);
      p->set_root(-1);
    }
    if (hostile) {
      v1::CallPrint bad = req.prints(0);
      bad.set_comm("../etc");
      *req.add_prints() = bad;
      bad.set_comm("bf12b7af");
      bad.set_seq(0);
      *req.add_prints() = bad;
      bad.set_seq(1);
      bad.set_rank(-1);
      *req.add_prints() = bad;
    }
    return core_->Report(req);
  };
  ASSERT_TRUE(prints(a_, 0, true));
  core_->Tick();
  EXPECT_TRUE(Glob(dir_.path() + "/out/desync-*").empty()) << "node a's ranks alone agree";
  ASSERT_TRUE(prints(b_, 4, false));
  core_->Tick();
  std::vector<std::string> found = Glob(dir_.path() + "/out/desync-*/verdict.json");
  ASSERT_EQ(found.size(), 1u);
  nlohmann::json v = nlohmann::json::parse(ReadFile(found[0]));
  EXPECT_EQ(v["kind"], "desync");
  EXPECT_TRUE(v["complete"].get<bool>());
  ASSERT_EQ(v["suspects"].size(), 1u);
  EXPECT_EQ(v["suspects"][0]["rank"], 6);
  EXPECT_EQ(v["sides"][0]["ranks"], nlohmann::json({0, 1, 2, 3, 4, 5, 7}));
  EXPECT_TRUE(Glob(dir_.path() + "/out/*etc*").empty());
  // Every agent is asked for its ranks' stacks, once.
  now_ += 0.1;
  core_->Tick();
  EXPECT_EQ(DumpsOf("node-a").size(), 1u);
  EXPECT_EQ(DumpsOf("node-b").size(), 1u);
  auto rounds = core_->Rounds();
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_NE(rounds[0].trigger.find("rank 6: out of step"), std::string::npos) << rounds[0].trigger;
}

}  // namespace
}  // namespace xtimer::collector
