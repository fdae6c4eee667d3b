// The node agent's comparison of its ranks' collective fingerprints (launcher/agent/desync_watch.h):
// `prints` messages in, a desync verdict out; a hostile message loses only what breaks the rules.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/stacks/stack_file.h"
#include "launcher/agent/desync_watch.h"

namespace xtimer {
namespace {

nlohmann::json Prints(int rank, uint64_t count, uint64_t seq = 5) {
  return {{"type", "prints"},
          {"rank", rank},
          {"calls", nlohmann::json::array({{"c0ffee00", 4, seq, "AllReduce", count, 7, 0, -1, ""}})}};
}

TEST(DesyncWatch, AMismatchBecomesAVerdictFile) {
  char dir[] = "/tmp/desync-watch-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  DesyncWatch w(DesyncSettings{dir, false});
  std::string why;
  for (int r = 0; r < 4; ++r) EXPECT_EQ(w.OnPrints(Prints(r, r == 2 ? 1u << 20 : 2u << 20), 0, &why), 0u);
  std::vector<std::string> dirs;
  auto found = w.Tick(0, 1'800'000'000'000, &dirs);
  ASSERT_EQ(found.size(), 1u);
  ASSERT_EQ(dirs.size(), 1u);
  std::ifstream in(dirs[0] + "/verdict.json");
  nlohmann::json v = nlohmann::json::parse(in);
  EXPECT_EQ(v["kind"], "desync");
  EXPECT_EQ(v["seq"], 5);
  ASSERT_EQ(v["suspects"].size(), 1u);
  EXPECT_EQ(v["suspects"][0]["rank"], 2);
  EXPECT_EQ(v["sides"][0]["ranks"], nlohmann::json({0, 1, 3}));
  EXPECT_EQ(v["sides"][1]["bytes"], 4u << 20);
  EXPECT_EQ(v["summary"][0],
            "ranks out of step on communicator c0ffee00: rank 2 called AllReduce #5 of 4 MiB (1048576 x float32); "
            "ranks 0-1/3 called AllReduce #5 of 8 MiB (2097152 x float32)");
  EXPECT_TRUE(w.Tick(10'000, 1'800'000'010'000, &dirs).empty());  // said once
  std::filesystem::remove_all(dir);
}

TEST(DesyncWatch, BadCallsAreDroppedOneByOneWithAReason) {
  DesyncWatch w(DesyncSettings{"", false});
  std::string why;
  EXPECT_EQ(w.OnPrints({{"type", "prints"}, {"calls", nlohmann::json::array()}}, 0, &why), 0u);
  EXPECT_EQ(why, "no rank");
  why.clear();
  EXPECT_EQ(w.OnPrints({{"type", "prints"}, {"rank", 1}, {"calls", "x"}}, 0, &why), 1u);
  EXPECT_EQ(why, "\"calls\" is not an array");
  nlohmann::json m = Prints(0, 10);
  m["calls"].push_back({"c0ffee00", 4, -1, "AllReduce", 1, 7, 0, -1, ""});            // negative seq
  m["calls"].push_back({"c0ffee00", 4, 6, "AllReduce", 1.5, 7, 0, -1, ""});           // fractional count
  m["calls"].push_back({std::string(100, 'x'), 4, 6, "AllReduce", 1, 7, 0, -1, ""});  // long communicator
  m["calls"].push_back({"c0ffee00", 4, 7, "AllReduce", 1, 7, 0, -1});                 // 8 fields
  m["calls"].push_back({"c0ffee00", 4, 8, "AllReduce", 1, 7, 1e12, -1, ""});          // redop out of range
  m["calls"].push_back(nullptr);
  why.clear();
  EXPECT_EQ(w.OnPrints(m, 0, &why), 6u);
  EXPECT_EQ(why, "comm_size or seq is not a number");
  // The good call was kept: a peer that differs from it is found.
  for (int r = 1; r < 4; ++r) w.OnPrints(Prints(r, r == 3 ? 11 : 10), 0, &why);
  auto found = w.Tick(0, 0, nullptr);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].suspects, (std::vector<int32_t>{3}));
}

TEST(DesyncWatch, TheCallSiteIsTheInnermostFrameOutsideTorchAndXtimer) {
  std::vector<PythonFrame> stack = {
      // root first
      {"<module>", "/job/train.py", 160},
      {"sync_grads", "/job/train.py", 91},
      {"all_reduce", "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", 2050},
      {"wrapper", "/usr/lib/python3/site-packages/xtimer/ckpt/hooks.py", 12}};
  EXPECT_EQ(DesyncWatch::CallSite(stack), "sync_grads (train.py:91)");
  EXPECT_EQ(DesyncWatch::CallSite({}), "");
}

}  // namespace
}  // namespace xtimer
