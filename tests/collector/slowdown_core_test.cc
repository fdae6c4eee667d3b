// The collector path of the slowdown judge (collector/slowdown_watch.h through CollectorCore):
// two agents' Steps calls for a simulated job (tests/slowdown/synthetic_job.h) in, then
// out_dir/slowdown.json, /metrics, the status object, the page, each agent's reply with its own
// ranks, and the SAMPLE commands for a host straggler and a peer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>

#include "collector/collector_core.h"
#include "slowdown/slowdown_proto.h"
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
      v1::StepsRequest req[2];
      std::vector<slowdown::StepRecord> later;
      for (auto& rec : pending_) {
        if (rec.t_end > start_ + now_) {
          later.push_back(std::move(rec));
          continue;
        }
        int node = rec.rank / 4;
        *req[node].add_records() = slowdown::StepRecordToProto(rec);
      }
      pending_ = std::move(later);
      for (int node = 0; node < 2; ++node) {
        req[node].set_session(session_[node]);
        ASSERT_TRUE(core_->Steps(req[node], &reply_[node]));
      }
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
  v1::Slowdown reply_[2];
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
  slowdown::Verdict b = slowdown::VerdictFromProto(reply_[1]);
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
  v1::StepsRequest req;
  req.set_session(session_[0]);
  v1::StepRecord* r = req.add_records();
  r->set_rank(9);
  r->set_world(8);
  r->set_t_begin(1);
  r->set_t_end(2);
  ASSERT_TRUE(core_->Steps(req));
  EXPECT_EQ(core_->Counters().step_records_invalid, 1u);
  EXPECT_EQ(core_->Counters().step_records, 0u);
  req.set_session("no such session");
  EXPECT_FALSE(core_->Steps(req));
  core_->Tick();
  EXPECT_FALSE(fs::exists(dir_ + "/out/slowdown.json")) << "nothing judged, nothing written";
  EXPECT_TRUE(nlohmann::json::parse(core_->StatusJson())["slowdown"].is_null());
}

}  // namespace
}  // namespace xtimer::collector
