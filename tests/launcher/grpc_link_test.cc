// The node agent's gRPC link (launcher/agent/grpc_collector_link.cc) against an in-process collector
// with an upload window of 1: a round's stacks are held until the collector's UPLOAD. Another
// agent, driven by hand, reports the hang first and keeps the window until it uploads, so the
// order is fixed (agent_two-agents, with real timing, may not need to hold anything). And the
// slowdown path over the wire: step records converted by the link and by the service reach the
// core's judge as they were, and its verdict comes back to the agent as the core has it.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "collector.grpc.pb.h"
#include "collector/collector_core.h"
#include "collector/collector_server.h"
#include "common/clock.h"
#include "slowdown/slowdown_judge.h"
#include "slowdown/slowdown_verdict_json.h"
#include "launcher/agent/collector_link.h"
#include "tests/slowdown/synthetic_job.h"
#include "tests/viewer/stack_json.h"

namespace xtimer {
namespace {

namespace fs = std::filesystem;
using collector::CollectorCore;
using collector::CollectorServer;

std::string Json(int32_t rank) {
  StackFile f = testing::MakeRank(rank, 8, {testing::Py("all_reduce", "/job/train.py", 2)},
                                  {testing::Native("_start", "/usr/bin/python3.11")});
  return testing::StackFileToJson(f);
}

v1::RankReport Ranked(int32_t rank, bool hung) {
  v1::RankReport r;
  r.mutable_rank()->set_rank(rank);
  r.mutable_rank()->set_local_rank(rank % 4);
  r.mutable_rank()->set_world_size(8);
  r.mutable_rank()->set_host(rank < 4 ? "node-a" : "node-b");
  r.set_state(hung ? v1::RANK_STATE_HUNG : v1::RANK_STATE_RUNNING);
  return r;
}

template <typename F>
bool WaitFor(F f, double timeout_s = 10) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return f();
}

TEST(GrpcCollectorLink, HoldsARoundsStacksUntilTheCollectorSaysUpload) {
  fs::path dir = fs::temp_directory_path() / ("xtimer-grpc-link-test-" + std::to_string(getpid()));
  fs::remove_all(dir);
  collector::CoreOptions c;
  c.out_dir = dir.string();
  c.upload_window = 1;
  c.upload_idle_s = 60;  // the hand-driven agent keeps its turn until it uploads
  c.output_formats = 1 | 2;
  CollectorCore core(c);
  std::string error;
  collector::ServerOptions o;
  o.listen = "127.0.0.1:0";
  auto server = CollectorServer::Start(&core, o, &error);
  ASSERT_TRUE(server) << error;
  std::atomic<bool> stop{false};
  std::thread ticker([&] {
    while (!stop) {
      core.Tick();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  const std::string address = "127.0.0.1:" + std::to_string(server->port());

  // node-a, by hand: ranks 0-3 hang first; its DUMP (in the reply) gets the window.
  auto stub = v1::Collector::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  v1::RegisterRequest reg;
  reg.set_protocol_version(1);
  reg.set_node("node-a");
  reg.set_agent_id("node-a-agent");
  for (int r = 0; r < 4; ++r) *reg.add_ranks() = Ranked(r, false).rank();
  v1::RegisterReply registered;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->Register(&ctx, reg, &registered).ok());
  }
  v1::ReportRequest hang;
  hang.set_session(registered.session());
  for (int r = 0; r < 4; ++r) *hang.add_reports() = Ranked(r, true);
  v1::ReportReply reply;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->Report(&ctx, hang, &reply).ok());
  }
  ASSERT_EQ(reply.command().kind(), v1::Command::DUMP);
  ASSERT_FALSE(reply.command().wait_for_upload());
  const std::string dump_id = reply.command().dump_id();

  // node-b: the link under test. Its ranks answer the DUMP at once.
  std::unique_ptr<CollectorLink> link = ConnectToCollector(address, "", "", &error);
  ASSERT_TRUE(link) << error;
  std::mutex mu;
  std::vector<std::string> dumps;
  link->Start([&](const std::string& id) {
    {
      std::lock_guard<std::mutex> lock(mu);
      dumps.push_back(id);
    }
    for (int r = 4; r < 8; ++r) link->Upload(r, id, Json(r));
  });
  link->Report({Ranked(4, true), Ranked(5, false), Ranked(6, true), Ranked(7, true)}, /*urgent=*/true);
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    return !dumps.empty();
  }));
  EXPECT_EQ(dumps.at(0), dump_id);
  EXPECT_EQ(core.Counters().dump_commands_held, 1u) << "node-b is asked while node-a has the window";

  // Held: nothing of node-b's arrives while node-a keeps the window.
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  EXPECT_EQ(core.Rounds().at(0).reported_count, 0u) << "node-b sent its stacks before the UPLOAD";

  // node-a uploads; the upload that completes it gives node-b the window (UPLOAD), and the link
  // sends what it held.
  for (int r = 0; r < 4; ++r) {
    v1::StackUpload u;
    u.set_session(registered.session());
    u.set_dump_id(dump_id);
    u.set_rank(r);
    u.set_stack_json(Json(r));
    v1::UploadReply up;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->UploadStacks(&ctx, u, &up).ok());
    EXPECT_TRUE(up.accepted()) << up.reason();
  }
  EXPECT_TRUE(WaitFor([&] { return core.Rounds().at(0).finished; })) << "node-b's held stacks never came";
  EXPECT_EQ(core.Rounds().at(0).ranks_reported, "0-7");
  EXPECT_EQ(core.Counters().upload_commands_sent, 1u);
  EXPECT_EQ(core.Counters().uploads_duplicate, 0u);

  link->Stop(1000);
  stop = true;
  ticker.join();
  server->Shutdown(0.5);
  fs::remove_all(dir);
}

TEST(GrpcCollectorLink, StepRecordsReachTheJudgeAsTheyWereAndItsVerdictComesBack) {
  fs::path dir = fs::temp_directory_path() / ("xtimer-grpc-link-steps-" + std::to_string(getpid()));
  fs::remove_all(dir);
  collector::CoreOptions c;
  c.out_dir = dir.string();
  c.slowdown = slowdown::JudgeOptions{};
  CollectorCore core(c);  // ticked by the test alone: one evaluation, when it says
  std::string error;
  collector::ServerOptions o;
  o.listen = "127.0.0.1:0";
  auto server = CollectorServer::Start(&core, o, &error);
  ASSERT_TRUE(server) << error;

  // 20 s of a two-node job whose rank 3 has a GPU half as fast from 10 s on; then one more step.
  slowdown::sim::JobConfig job_config;
  job_config.start = 1.7e9;
  job_config.injections = {{slowdown::sim::Injection::kSlowGpu, 3, 2.0, 10}};
  slowdown::sim::SyntheticJob job(job_config);
  std::vector<slowdown::StepRecord> records, more;
  while (job.now() < job_config.start + 20)
    for (auto& [end, rec] : job.Step()) records.push_back(std::move(rec));
  for (auto& [end, rec] : job.Step()) more.push_back(std::move(rec));

  std::mutex mu;
  std::vector<slowdown::Verdict> verdicts;
  std::unique_ptr<CollectorLink> link =
      ConnectToCollector("127.0.0.1:" + std::to_string(server->port()), "", "", &error);
  ASSERT_TRUE(link) << error;
  link->SetSlowdownHandlers([](int32_t, double, double) {},
                            [&](const slowdown::Verdict& v) {
                              std::lock_guard<std::mutex> lock(mu);
                              verdicts.push_back(v);
                            });
  link->Start([](const std::string&) {});
  const double arrival = static_cast<double>(WallMs()) / 1000;
  link->Steps(records);
  ASSERT_TRUE(WaitFor([&] { return core.Counters().step_records == records.size(); }, 30))
      << core.Counters().step_records << " of " << records.size() << " records reached the core";
  EXPECT_EQ(core.Counters().step_records_invalid, 0u);

  // The core's evaluation is a judge's fed the same records directly.
  core.Tick();
  const slowdown::Verdict judged = core.Slowdown();
  ASSERT_GT(judged.updated, 0);
  ASSERT_TRUE(judged.judged);
  slowdown::Judge direct(c.slowdown);
  for (const slowdown::StepRecord& r : records) direct.Add(r, arrival);
  const slowdown::Verdict want = direct.Evaluate(judged.updated);
  EXPECT_EQ(slowdown::VerdictJson(judged).dump(), slowdown::VerdictJson(want).dump());
  ASSERT_EQ(judged.ranks.size(), 8u);
  for (const slowdown::RankStatus& r : judged.ranks)
    if (r.rank == 3) EXPECT_LT(r.score, 0.85) << "rank 3's slow GPU is in what the judge got";

  // The next Steps call's reply brings that verdict to the agent (all 8 ranks are this agent's).
  link->Steps(more);
  ASSERT_TRUE(WaitFor(
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        return !verdicts.empty();
      },
      30));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(slowdown::VerdictJson(verdicts.front()).dump(), slowdown::VerdictJson(judged).dump());
    EXPECT_EQ(verdicts.front().window_end, judged.window_end);
  }
  link->Stop(1000);
  server->Shutdown(0.5);
  fs::remove_all(dir);
}

// xtimer_run --evict-slow-nodes: the evicted node tells its collector and exits at once; the
// link's Stop waits for the eviction as for the last report, and it arrives whole.
TEST(GrpcCollectorLink, AnEvictionReachesTheCollectorBeforeTheLinkStops) {
  fs::path dir = fs::temp_directory_path() / ("xtimer-grpc-link-evict-" + std::to_string(getpid()));
  fs::remove_all(dir);
  collector::CoreOptions c;
  c.out_dir = dir.string();
  CollectorCore core(c);
  std::string error;
  collector::ServerOptions o;
  o.listen = "127.0.0.1:0";
  auto server = CollectorServer::Start(&core, o, &error);
  ASSERT_TRUE(server) << error;
  std::unique_ptr<CollectorLink> link =
      ConnectToCollector("127.0.0.1:" + std::to_string(server->port()), "", "", &error);
  ASSERT_TRUE(link) << error;
  link->Start([](const std::string&) {});
  v1::NodeEviction e;
  e.set_node("host4-5021-9f2c01");
  e.set_name("node2");
  e.set_round(1);
  e.set_cause("gpu_compute");
  e.set_scope("node");
  e.set_cost(0.44);
  e.set_reason("node node2 (group rank 2) evicted as slow (--evict-slow-nodes)");
  link->Eviction(e);
  link->Stop(3000);
  EXPECT_EQ(core.Counters().node_evictions, 1u);
  nlohmann::json st = nlohmann::json::parse(core.StatusJson());
  ASSERT_EQ(st["evictions"].size(), 1u) << st.dump();
  EXPECT_EQ(st["evictions"][0]["name"], "node2");
  EXPECT_EQ(st["evictions"][0]["node"], "host4-5021-9f2c01");
  EXPECT_EQ(st["evictions"][0]["reason"], e.reason());
  server->Shutdown(0.5);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace xtimer
