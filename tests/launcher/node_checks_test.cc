// The pure parts of xtimer_run's GPU checks: --precheck's reading of its child's answer
// (launcher/run/precheck.h) and --comm-perf-test's table (launcher/run/comm_perf.h). The GPU work
// itself runs on the simulated runtime in tests/launcher/check_run.py (precheck, comm-perf).
#include <gtest/gtest.h>

#include "launcher/run/comm_perf.h"
#include "launcher/run/precheck.h"

namespace xtimer::run {
namespace {

using nlohmann::json;

TEST(PrecheckAnswer, FiguresOfAHealthyNode) {
  // 2048^3 fp32 in 0.1718 ms: 2 * 2048^3 / 1.718e-4 s = 100 TFLOPS. 16 MiB over 2 GPUs in 1 ms:
  // algbw 16.78 GB/s, busbw x 2(2-1)/2 = 16.8 GB/s.
  PrecheckResult r = ReadPrecheckAnswer(json::parse(R"({"ok": true,
      "gpus": [{"gpu": 0, "n": 2048, "seconds": 1.718e-4}, {"gpu": 1, "n": 2048, "seconds": 3.436e-4}],
      "allreduce": {"gpus": 2, "bytes": 16777216, "seconds": 0.001}})"));
  EXPECT_TRUE(r.passed);
  ASSERT_EQ(r.lines.size(), 3u);
  EXPECT_EQ(r.lines[0], "GPU 0: 2048x2048 fp32 matmul at 100.0 TFLOPS");
  EXPECT_EQ(r.lines[1], "GPU 1: 2048x2048 fp32 matmul at 50.0 TFLOPS");
  EXPECT_EQ(r.lines[2], "allreduce of 16 MiB over 2 GPUs: 1.000 ms, bus bandwidth 16.8 GB/s");
}

TEST(PrecheckAnswer, WhatTheNodeLacksIsSaidNotFailed) {
  PrecheckResult r = ReadPrecheckAnswer(
      json::parse(R"({"ok": false, "no_cuda": true, "error": "cannot load libcudart.so.13: not found"})"));
  EXPECT_TRUE(r.passed);
  ASSERT_EQ(r.lines.size(), 1u);
  EXPECT_NE(r.lines[0].find("no CUDA runtime on this node"), std::string::npos);

  r = ReadPrecheckAnswer(json::parse(R"({"ok": true, "gpus": [], "matmul_skipped": "cannot load libcublas.so.13",
      "allreduce": {"gpus": 1, "bytes": 16777216, "seconds": 0.001}})"));
  EXPECT_TRUE(r.passed);
  ASSERT_EQ(r.lines.size(), 2u);
  EXPECT_EQ(r.lines[0], "matmul skipped: cannot load libcublas.so.13");
  EXPECT_NE(r.lines[1].find("allreduce on 1 GPU: NCCL works"), std::string::npos);
}

TEST(PrecheckAnswer, AFailureOrAnUnreadableAnswerFailsTheNode) {
  PrecheckResult r = ReadPrecheckAnswer(json::parse(R"({"ok": false, "error": "GPU 1: cublasSgemm: failed"})"));
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.why, "GPU 1: cublasSgemm: failed");
  for (const char* bad :
       {R"([1])", R"({"ok": "yes"})", R"({"ok": true, "gpus": [{"gpu": 0}]})",
        R"({"ok": true, "gpus": [{"gpu": 0, "n": 2048, "seconds": 0}]})", R"({"ok": true, "gpus": 3})"}) {
    r = ReadPrecheckAnswer(json::parse(bad));
    EXPECT_FALSE(r.passed) << bad;
    EXPECT_FALSE(r.why.empty()) << bad;
    EXPECT_EQ(r.why.find('\n'), std::string::npos) << r.why;
  }
  r = ReadPrecheckAnswer(json::parse("not json", nullptr, false));
  EXPECT_FALSE(r.passed);
}

TEST(PerfTable, NcclTestsFigures) {
  // 64 MiB in 10 ms over 4 ranks: algbw 6.71 GB/s, busbw x 2*3/4 = 10.07 GB/s.
  std::string t = FormatPerfTable(0, 4, 2, {{1 << 20, 0.0005}, {int64_t{64} << 20, 0.010}});
  EXPECT_EQ(t,
            "comm perf test: allreduce (float32, sum) over 4 rank(s) on 2 node(s), timed on rank 0\n"
            "        size         time        algbw        busbw\n"
            "       1 MiB     0.500 ms    2.10 GB/s    3.15 GB/s\n"
            "      64 MiB    10.000 ms    6.71 GB/s   10.07 GB/s\n");
}

}  // namespace
}  // namespace xtimer::run
