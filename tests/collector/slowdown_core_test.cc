// The collector path of the slowdown judge (collector/slowdown_watch.h through CollectorCore):
// two agents' Steps calls for a simulated job (tests/slowdown/synthetic_job.h) in, then
// out_dir/slowdown.json, /metrics, the status object, the page, each agent's reply with its own
// ranks, and the SAMPLE commands for a host straggler and a peer. Also the wire's conversions
// that the gRPC link and service make (slowdown/slowdown_proto.h): struct, message, the
// same struct.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>

#include "collector/collector_core.h"
#include "common/steps/step_json.h"
#include "slowdown/slowdown_proto.h"
#include "slowdown/slowdown_verdict_json.h"
#include "tests/slowdown/synthetic_job.h"

namespace xtimer::collector {
namespace {

namespace fs = std::filesystem;
using slowdown::sim::Injection;
using slowdown::sim::JobConfig;
using slowdown::sim::SyntheticJob;

class SlowdownCoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = (fs::temp_directory_path() / "xtimer-slowdown-core-XXXXXX").string();
    dir_ = mkdtemp(t.data());
    CoreOptions o;
    o.out_dir = dir_ + "/out";
    o.monotonic_s = [this] { return now_; };
    o.wall_ms = [this] { return static_cast<int64_t>((start_ + now_) * 1000); };
    o.slowdown = slowdown::JudgeOptions{};
    core_ = std::make_unique<CollectorCore>(o);
    for (int node = 0; node < 2; ++node) {
      v1::RegisterRequest req;
      req.set_protocol_version(1);
      req.set_node("node" + std::to_string(node));
      req.set_agent_id("agent" + std::to_string(node));
      session_[node] = core_->Register(req, [this, node](const v1::Command& c) {
        std::lock_guard<std::mutex> lock(mu_);
        commands_[node].push_back(c);
      });
      ASSERT_FALSE(session_[node].empty());
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs the job to `seconds`: each second, each agent sends its ranks' records that ended;
  // the core ticks; SAMPLE commands start sampling in the job.
  void RunTo(SyntheticJob& job, double seconds) {
    while (now_ < seconds) {
      now_ += 1;
      while (job.now() < start_ + now_)
        for (auto& [end, rec] : job.Step()) pending_.push_back(std::move(rec));
      std::vector<slowdown::StepRecord> records[2];
      std::vector<slowdown::StepRecord> later;
      for (auto& rec : pending_) {
        if (rec.t_end > start_ + now_) {
          later.push_back(std::move(rec));
          continue;
        }
        records[rec.rank / 4].push_back(std::move(rec));
      }
      pending_ = std::move(later);
      for (int node = 0; node < 2; ++node)
        ASSERT_TRUE(core_->Steps(session_[node], std::move(records[node]), &reply_[node]));
      core_->Tick();
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [node, list] : commands_)
        for (const v1::Command& c : list)
          if (c.kind() == v1::Command::SAMPLE) {
            sampled_[c.rank()] = node;
            job.Sample(c.rank(), start_ + now_ + c.seconds());
          }
      commands_.clear();
    }
  }

  std::string ReadFile(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::string dir_;
  double start_ = 1.7e9, now_ = 0;
  std::unique_ptr<CollectorCore> core_;
  std::string session_[2];
  slowdown::Verdict reply_[2];
  std::mutex mu_;
  std::map<int, std::vector<v1::Command>> commands_;
  std::map<int32_t, int> sampled_;  // rank -> the agent asked
  std::vector<slowdown::StepRecord> pending_;
};

TEST_F(SlowdownCoreTest, SlowGpuReachesTheFileMetricsStatusPageAndReplies) {
  JobConfig c;
  c.start = start_;
  c.injections = {{Injection::kSlowGpu, 3, 2.0, 30}};
  SyntheticJob job(c);
  RunTo(job, 28);
  nlohmann::json healthy = nlohmann::json::parse(ReadFile(dir_ + "/out/slowdown.json"));
  EXPECT_TRUE(healthy["slow"].empty()) << healthy.dump();
  EXPECT_TRUE(healthy["step_time_s"].is_number());
  RunTo(job, 45);

  nlohmann::json j = nlohmann::json::parse(ReadFile(dir_ + "/out/slowdown.json"));
  ASSERT_EQ(j["slow"].size(), 1u) << j.dump();
  EXPECT_EQ(j["slow"][0]["rank"], 3);
  EXPECT_EQ(j["slow"][0]["node"], "node0");
  EXPECT_EQ(j["slow"][0]["cause"], "gpu_compute");
  EXPECT_EQ(j["slow"][0]["scope"], "rank");
  EXPECT_NEAR(j["updated"].get<double>(), start_ + now_, 1.01);
  EXPECT_EQ(j["ranks"].size(), 8u);

  std::string metrics = core_->MetricsText();
  EXPECT_NE(metrics.find("xtimer_rank_slow{rank=\"3\",host=\"node0\",cause=\"gpu_compute\"} 1"), std::string::npos);
  EXPECT_NE(metrics.find("xtimer_rank_slow{rank=\"2\",host=\"node0\",cause=\"gpu_compute\"} 0"), std::string::npos);
  const std::regex one("xtimer_rank_slow\\{[^}]*\\} 1\n");
  size_t ones = 0;
  for (std::sregex_iterator it(metrics.begin(), metrics.end(), one), end; it != end; ++it) ++ones;
  EXPECT_EQ(ones, 1u) << "one rank, one cause";
  EXPECT_NE(metrics.find("xtimer_rank_step_seconds{rank=\"7\",host=\"node1\"}"), std::string::npos);
  EXPECT_NE(metrics.find("xtimer_rank_slow_score{rank=\"3\",host=\"node0\"}"), std::string::npos);
  EXPECT_NE(metrics.find("xtimer_collector_step_records_total{result=\"ok\"}"), std::string::npos);

  nlohmann::json st = nlohmann::json::parse(core_->StatusJson());
  ASSERT_TRUE(st["slowdown"].is_object());
  EXPECT_EQ(st["slowdown"]["slow"][0]["rank"], 3);
  EXPECT_FALSE(st["slowdown"].contains("ranks")) << "the ranks are in the status's own list";

  std::string page = core_->StatusPageHtml();
  EXPECT_NE(page.find("<div id=\"slowdown\">"), std::string::npos);
  EXPECT_NE(page.find("<tr class=\"slow\" data-cause=\"gpu_compute\"><td>rank 3 (node0)</td>"), std::string::npos)
      << page;

  // Each agent's reply: the job's findings, its own ranks' step times.
  const slowdown::Verdict& b = reply_[1];
  ASSERT_EQ(b.slow.size(), 1u);
  EXPECT_EQ(b.slow[0].rank, 3);
  ASSERT_EQ(b.ranks.size(), 4u);
  EXPECT_EQ(b.ranks.front().rank, 4);
  EXPECT_TRUE(sampled_.empty()) << "no host straggler: no samples asked";
}

TEST_F(SlowdownCoreTest, HostStragglerAndOnePeerAreAskedForSamplesThroughTheirAgent) {
  JobConfig c;
  c.start = start_;
  c.injections = {{Injection::kHost, 6, 0.1, 20}};
  SyntheticJob job(c);
  RunTo(job, 45);
  EXPECT_EQ(sampled_, (std::map<int32_t, int>{{4, 1}, {6, 1}})) << "rank 6 and a peer on its node, via node1's agent";
  slowdown::Verdict v = core_->Slowdown();
  ASSERT_EQ(v.slow.size(), 1u);
  EXPECT_EQ(v.slow[0].cause, slowdown::Cause::kHost);
  EXPECT_NE(v.slow[0].detail.find("slow_fn (train.py:40)"), std::string::npos) << v.slow[0].detail;
  EXPECT_NE(core_->MetricsText().find("xtimer_collector_sample_commands_total 2"), std::string::npos);
}

TEST_F(SlowdownCoreTest, BadRecordsAreCountedAndAnUnknownSessionRefused) {
  slowdown::StepRecord r;
  r.rank = 9;
  r.world = 8;
  r.t_begin = 1;
  r.t_end = 2;
  ASSERT_TRUE(core_->Steps(session_[0], {r}));
  EXPECT_EQ(core_->Counters().step_records_invalid, 1u);
  EXPECT_EQ(core_->Counters().step_records, 0u);
  EXPECT_FALSE(core_->Steps("no such session", {r}));
  core_->Tick();
  EXPECT_FALSE(fs::exists(dir_ + "/out/slowdown.json")) << "nothing judged, nothing written";
  EXPECT_TRUE(nlohmann::json::parse(core_->StatusJson())["slowdown"].is_null());
}

// ---- the wire (slowdown_proto.h): what the gRPC link sends is what the core gets ----

slowdown::StepRecord FullRecord() {
  slowdown::StepRecord r;
  r.rank = 5;
  r.world = 8;
  r.node = "node-b \xc3\xa9";
  r.pid = 4242;
  r.step = 77;
  r.t_begin = 1.7e9 + 0.125;
  r.t_end = 1.7e9 + 0.5;
  r.gpu_busy_s = 0.25;
  r.gpu_idle_s = 0.0625;
  r.issue_latency_s = 0.001;
  r.gc_s = 0.003;
  r.data_s = 0.004;
  r.kernels = {{"GEMM bf16 4096x4096x4096", 4, 0.08, 312.5}, {"elementwise_kernel", 20, 0.02, 0}};
  r.colls = {{"c0ffee", 12, "AllReduce", 1 << 20, 8, 1.7e9 + 0.3, 1.7e9 + 0.31, 1.7e9 + 0.33},
             {"beef", -1, "AllGather", 0, 2, 0, 1.7e9 + 0.4, 1.7e9 + 0.4}};
  r.samples = {{"slow_fn (train.py:40);main (train.py:90)", 37}};
  return r;
}

TEST(SlowdownWire, AStepRecordIsTheSameAfterTheWire) {
  const slowdown::StepRecord r = FullRecord();
  v1::StepRecord p = slowdown::StepRecordToProto(r);
  // Through bytes, as gRPC carries it.
  v1::StepRecord read;
  ASSERT_TRUE(read.ParseFromString(p.SerializeAsString()));
  EXPECT_EQ(slowdown::StepRecordToJson(slowdown::StepRecordFromProto(read)), slowdown::StepRecordToJson(r));
  slowdown::StepRecord empty;
  EXPECT_EQ(slowdown::StepRecordToJson(slowdown::StepRecordFromProto(slowdown::StepRecordToProto(empty))),
            slowdown::StepRecordToJson(empty));
}

TEST(SlowdownWire, AStepRecordFromTheWireKeepsWhatAReaderKeeps) {
  v1::StepRecord p = slowdown::StepRecordToProto(FullRecord());
  p.set_node(std::string(1 << 20, 'n'));
  for (int i = 0; i < 100; ++i) p.add_kernels()->set_sig("k" + std::to_string(i));
  slowdown::StepRecord r = slowdown::StepRecordFromProto(p);
  EXPECT_EQ(r.node.size(), slowdown::StepLimits::kMaxNode);
  EXPECT_EQ(r.kernels.size(), slowdown::StepLimits::kMaxKernels);
  EXPECT_EQ(r.kernels[0].sig, "GEMM bf16 4096x4096x4096");
}

TEST(SlowdownWire, AVerdictIsTheSameAfterTheWire) {
  slowdown::Verdict v;
  v.updated = 1.7e9 + 12.5;
  v.judged = true;
  v.step_time_s = 0.25;
  v.baseline_step_time_s = 0.2;
  v.window_end = 1.7e9 + 11;
  slowdown::Finding rank;
  rank.scope = slowdown::Scope::kRank;
  rank.cause = slowdown::Cause::kGpuCompute;
  rank.rank = 3;
  rank.node = "node0";
  rank.ranks = {3};
  rank.since = 1.7e9 + 3;
  rank.score = 0.51;
  rank.cost = 0.33;
  rank.detail = "GEMM bf16 4096x4096x4096 at 0.51x its peers";
  slowdown::Finding link = rank;
  link.scope = slowdown::Scope::kLink;
  link.cause = slowdown::Cause::kNetwork;
  link.rank = -1;
  link.node = "node0";
  link.peer = "node1";
  link.ranks = {0, 1, 2, 3, 4, 5, 6, 7};
  slowdown::Finding job = rank;
  job.scope = slowdown::Scope::kJob;
  job.cause = slowdown::Cause::kDataLoading;
  job.rank = -1;
  job.node = "";
  job.ranks = {};
  v.slow = {rank, link, job};
  for (int32_t r = 0; r < 8; ++r) {
    slowdown::RankStatus s;
    s.rank = r;
    s.node = r < 4 ? "node0" : "node1";
    s.step_time_s = 0.25 + r * 0.001;
    s.score = r == 3 ? 0.5 : 1;
    s.individual = 0.9;
    s.steps = 20 + r;
    s.slow = r == 3;
    s.cause = r == 3 ? slowdown::Cause::kGpuCompute : slowdown::Cause::kHost;
    v.ranks.push_back(s);
  }
  v1::Slowdown read;
  ASSERT_TRUE(read.ParseFromString(slowdown::VerdictToProto(v).SerializeAsString()));
  slowdown::Verdict back = slowdown::VerdictFromProto(read);
  EXPECT_EQ(slowdown::VerdictJson(back), slowdown::VerdictJson(v));
  EXPECT_EQ(back.judged, v.judged);
  EXPECT_EQ(back.window_end, v.window_end);
  ASSERT_EQ(back.slow.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back.slow[i].scope, v.slow[i].scope);
    EXPECT_EQ(back.slow[i].rank, v.slow[i].rank);
    EXPECT_EQ(back.slow[i].peer, v.slow[i].peer);
  }
}

}  // namespace
}  // namespace xtimer::collector
