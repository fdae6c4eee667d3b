// The JSON report and the terminal table.
#include "netprobe/report.h"

#include <gtest/gtest.h>

namespace xtimer::netprobe {
namespace {

using nlohmann::json;

ReportInput Sample() {
  ReportInput in;
  in.options.nnodes = 4;
  in.options.size = 1 << 20;
  in.inputs.resize(4);
  for (int r = 0; r < 4; ++r) {
    in.inputs[r].present = r != 3;
    in.info.push_back({"host" + std::to_string(r), "10.0.0." + std::to_string(r + 1)});
  }
  TestResult t;
  t.a = 0;
  t.b = 1;
  t.completed = true;
  t.time_s = 0.2;
  t.fwd_mbps = 10.5;
  t.bwd_mbps = 11;
  t.latency_us = 80;
  t.extra = {{"allreduce_busbw_mbps", 9.5}};
  in.tests.push_back(t);
  TestResult f;
  f.a = 1;
  f.b = 2;
  f.error = "connect to 10.0.0.3:4000: no answer";
  in.tests.push_back(f);
  RoundRecord rr;
  rr.round = 1;
  rr.plan = RoundPlan{"neighbours", {{{0, 1}}, {{1, 2}}}, true};
  rr.tests = {0, 1};
  rr.elapsed_s = 1.25;
  in.rounds.push_back(rr);
  in.verdict = Judge(in.inputs, in.tests, ConfigOf(in.options), true);
  in.probe_time_s = 3.5;
  return in;
}

TEST(Report, HasTheDocumentedFields) {
  json r = BuildReport(Sample());
  EXPECT_EQ(r["format"], "xtimer-netprobe");
  EXPECT_EQ(r["version"], 1);
  EXPECT_EQ(r["healthy"], false);
  EXPECT_EQ(r["exit_code"], 1);
  EXPECT_EQ(ExitCodeOf(r), 1);
  ASSERT_EQ(r["nodes"].size(), 4u);
  EXPECT_EQ(r["nodes"][3]["status"], "missing");
  EXPECT_EQ(r["nodes"][0]["status"], "ok");
  EXPECT_EQ(r["nodes"][0]["host"], "host0");
  EXPECT_EQ(r["nodes"][0]["bandwidth_mbps"], 10.5);
  EXPECT_EQ(r["nodes"][2]["status"], "faulty");
  EXPECT_EQ(r["nodes"][2]["decided"], false);
  EXPECT_TRUE(r["nodes"][3]["time_s"].is_null());
  ASSERT_EQ(r["links"].size(), 2u);
  EXPECT_EQ(r["links"][0]["nodes"], json({0, 1}));
  EXPECT_EQ(r["links"][0]["status"], "ok");
  EXPECT_EQ(r["links"][0]["extra"]["allreduce_busbw_mbps"], 9.5);
  EXPECT_EQ(r["links"][1]["error"], "connect to 10.0.0.3:4000: no answer");
  ASSERT_EQ(r["rounds"].size(), 1u);
  EXPECT_EQ(r["rounds"][0]["kind"], "neighbours");
  EXPECT_EQ(r["rounds"][0]["steps"], json::parse("[[[0,1]],[[1,2]]]"));
  EXPECT_EQ(r["rounds"][0]["tests"][1]["result"], "bad");
  EXPECT_EQ(r["summary"]["missing"], 1);
  EXPECT_EQ(r["max_rounds"], "auto");
  EXPECT_TRUE(r["min_bandwidth_mbps"].is_null());
  EXPECT_EQ(r["probe_time_s"], 3.5);
}

TEST(Report, ProbeFailureIsExitTwo) {
  ReportInput in = Sample();
  in.error = "rendezvous lost";
  json r = BuildReport(in);
  EXPECT_EQ(ExitCodeOf(r), 2);
  EXPECT_EQ(r["error"], "rendezvous lost");
}

TEST(Report, TableNamesProblems) {
  std::string t = RenderTable(BuildReport(Sample()));
  EXPECT_NE(t.find("PROBLEMS FOUND"), std::string::npos) << t;
  EXPECT_NE(t.find("missing"), std::string::npos);
  EXPECT_NE(t.find("faulty?"), std::string::npos) << t;  // not decided
  EXPECT_NE(t.find("10.5 MB/s"), std::string::npos) << t;
  EXPECT_NE(t.find("links not ok"), std::string::npos);
}

TEST(Report, RenderingNeverThrowsOnOddJson) {
  for (const char* text : {"null", "[]", "{\"nodes\": 5}", "{\"nodes\": [1, \"x\", {\"rank\": \"a\", \"decided\": 3}]}",
                           "{\"links\": [{\"nodes\": [1]}, {\"nodes\": \"x\", \"status\": 4}], \"exit_code\": 9}",
                           "{\"nodes\": [{\"local\": {\"pairs\": [{\"ok\": \"no\"}, 7]}}]}"}) {
    json j = json::parse(text);
    EXPECT_NO_THROW(RenderTable(j)) << text;
    EXPECT_EQ(ExitCodeOf(j), 2) << text;
  }
}

TEST(Report, RoundProgress) {
  ReportInput in = Sample();
  std::string s = RenderRound(in.rounds[0], in.tests, in.verdict, ConfigOf(in.options));
  EXPECT_NE(s.find("round 1 (neighbours): 2 tests in 2 steps"), std::string::npos) << s;
  EXPECT_NE(s.find("1-2"), std::string::npos);
  EXPECT_NE(s.find("no answer"), std::string::npos);
}

TEST(Report, Bandwidths) {
  EXPECT_EQ(FormatMbps(12345), "12.35 GB/s");
  EXPECT_EQ(FormatMbps(456.4), "456 MB/s");
  EXPECT_EQ(FormatMbps(7.81), "7.81 MB/s");
}

}  // namespace
}  // namespace xtimer::netprobe
