// xtimer_run --network-check: the verdict a round's nodes act on, from the probe's report
// (launcher/run/network_check.h). Reports here are shaped like docs/formats.md's.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <nlohmann/json.hpp>

#include "launcher/run/network_check.h"

namespace xtimer::run {
namespace {

using nlohmann::json;

// A report with one entry per status, in rank order.
json Report(const std::vector<std::string>& statuses) {
  json nodes = json::array();
  for (size_t r = 0; r < statuses.size(); ++r) {
    json n = {{"rank", r}, {"status", statuses[r]}, {"decided", true}};
    if (statuses[r] != "ok") n["reason"] = "why " + std::to_string(r);
    nodes.push_back(n);
  }
  return {{"format", "xtimer-netprobe"}, {"exit_code", 1}, {"timeout_s", 4.0}, {"probe_time_s", 5.5}, {"nodes", nodes}};
}

std::vector<Fate> Fates(const RoundVerdict& v) {
  std::vector<Fate> out;
  for (const NodeFate& f : v.nodes) out.push_back(f.fate);
  return out;
}

constexpr Fate P = Fate::kPassed, X = Fate::kExcluded, U = Fate::kUnchecked;

TEST(NetworkCheck, FaultyLeavesStragglerOnlyWithExcludeStraggler) {
  json r = Report({"ok", "ok", "faulty", "straggler"});
  RoundVerdict keep = JudgeRound(r, 4, false);
  EXPECT_TRUE(keep.error.empty());
  EXPECT_EQ(Fates(keep), (std::vector<Fate>{P, P, X, P}));
  EXPECT_EQ(keep.nodes[2].reason, "why 2");
  EXPECT_EQ(keep.nodes[3].status, "straggler");
  EXPECT_EQ(keep.Excluded(), (std::vector<int>{2}));
  EXPECT_NE(keep.Summary().find("group rank 3 straggler (kept)"), std::string::npos) << keep.Summary();
  RoundVerdict drop = JudgeRound(r, 4, true);
  EXPECT_EQ(Fates(drop), (std::vector<Fate>{P, P, X, X}));
}

TEST(NetworkCheck, NodeThatNeverReachedTheProbeIsFaulty) {
  // Group rank 0 reached 6 of 7 others: the one it missed is cut off.
  RoundVerdict v = JudgeRound(Report({"ok", "ok", "ok", "missing", "ok", "ok", "ok", "ok"}), 8, false);
  EXPECT_EQ(Fates(v), (std::vector<Fate>{P, P, P, X, P, P, P, P}));
  EXPECT_EQ(v.nodes[3].status, "faulty");
  EXPECT_NE(v.nodes[3].reason.find("unreachable"), std::string::npos) << v.nodes[3].reason;
}

TEST(NetworkCheck, HostThatMostNodesCouldNotReachIsTheOneLeftOut) {
  RoundVerdict v = JudgeRound(Report({"ok", "missing", "missing", "ok"}), 4, false);
  EXPECT_EQ(Fates(v), (std::vector<Fate>{X, U, U, U}));
  EXPECT_NE(v.nodes[0].reason.find("2 of the 3 other nodes"), std::string::npos) << v.nodes[0].reason;
  // Group rank 0 could not even reach the probe it hosts.
  RoundVerdict self = JudgeRound(Report({"missing", "missing", "missing"}), 3, false);
  EXPECT_EQ(Fates(self), (std::vector<Fate>{X, U, U}));
  EXPECT_NE(self.nodes[0].reason.find("its own address"), std::string::npos) << self.nodes[0].reason;
  // Two nodes: nobody can tell which side is cut off.
  EXPECT_EQ(Fates(JudgeRound(Report({"ok", "missing"}), 2, false)), (std::vector<Fate>{X, X}));
  // Three nodes, one missed: group rank 0 reached the other, so the missed one is at fault.
  EXPECT_EQ(Fates(JudgeRound(Report({"ok", "ok", "missing"}), 3, false)), (std::vector<Fate>{P, P, X}));
}

TEST(NetworkCheck, FailedProbeLeavesEveryoneUnchecked) {
  json failed = {{"format", "xtimer-netprobe"}, {"exit_code", 2}, {"error", "cannot listen"}};
  RoundVerdict v = JudgeRound(failed, 3, true);
  EXPECT_EQ(v.error, "cannot listen");
  EXPECT_EQ(Fates(v), (std::vector<Fate>{U, U, U}));
  EXPECT_TRUE(v.Excluded().empty());
  EXPECT_FALSE(JudgeRound(json(), 3, false).error.empty());
  EXPECT_FALSE(JudgeRound(Report({"ok", "ok"}), 3, false).error.empty());  // no verdict on rank 2
}

TEST(NetworkCheck, VerdictRoundTripsThroughTheStoreAndRejectsGarbage) {
  RoundVerdict v = JudgeRound(Report({"ok", "faulty", "straggler"}), 3, true);
  json j = v.ToJson({"a", "b", "c"});
  EXPECT_EQ(j["nodes"][1]["node"], "b");
  RoundVerdict back;
  std::string error;
  ASSERT_TRUE(RoundVerdict::FromJson(j, 3, &back, &error)) << error;
  EXPECT_EQ(Fates(back), Fates(v));
  EXPECT_EQ(back.nodes[2].reason, v.nodes[2].reason);
  EXPECT_FALSE(RoundVerdict::FromJson(j, 4, &back, &error));
  EXPECT_NE(error.find("4 nodes"), std::string::npos) << error;
  j["nodes"][0]["fate"] = "maybe";
  EXPECT_FALSE(RoundVerdict::FromJson(j, 3, &back, &error));
  EXPECT_FALSE(RoundVerdict::FromJson(json("x"), 3, &back, &error));
}

TEST(NetworkCheck, AddressesWithPorts) {
  EXPECT_EQ(JoinHostPort("10.0.0.1", 5), "10.0.0.1:5");
  EXPECT_EQ(JoinHostPort("fe80::1", 5), "[fe80::1]:5");
  std::string host;
  int port = 0;
  ASSERT_TRUE(SplitProbeAddress(JoinHostPort("fe80::1", 29400), &host, &port));
  EXPECT_EQ(host, "fe80::1");
  EXPECT_EQ(port, 29400);
  EXPECT_FALSE(SplitProbeAddress("nonsense", &host, &port));
}

// --min-bandwidth reaches the probe as a value, over XTIMER_NETCHECK_MIN_BANDWIDTH, which is
// the floor without it; the process's environment is not written.
TEST(NetworkCheck, MinBandwidthFlagOverTheVariable) {
  unsetenv("XTIMER_NETCHECK_MIN_BANDWIDTH");
  EXPECT_EQ(ProbeSettingsFromEnv(false, 0).min_bandwidth_mbps, 0);
  EXPECT_EQ(ProbeSettingsFromEnv(false, 50).min_bandwidth_mbps, 50);
  EXPECT_EQ(std::getenv("XTIMER_NETCHECK_MIN_BANDWIDTH"), nullptr);
  setenv("XTIMER_NETCHECK_MIN_BANDWIDTH", "7", 1);
  EXPECT_EQ(ProbeSettingsFromEnv(true, 0).min_bandwidth_mbps, 7);
  EXPECT_EQ(ProbeSettingsFromEnv(true, 50).min_bandwidth_mbps, 50);
  EXPECT_TRUE(ProbeSettingsFromEnv(true, 50).exclude_straggler);
  unsetenv("XTIMER_NETCHECK_MIN_BANDWIDTH");
}

}  // namespace
}  // namespace xtimer::run
