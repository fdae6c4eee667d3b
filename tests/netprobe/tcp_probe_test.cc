// The tcp backend over loopback (two threads), and the pure helpers of the nccl backend.
#include "netprobe/tcp_probe.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "common/clock.h"
#include "common/net/net.h"
#include "netprobe/gpu_probe.h"

namespace xtimer::netprobe {
namespace {

using namespace xtimer::net;  // the sockets under test (common/net)

struct Responder {
  Fd listen;
  int port = 0;
  bool ok = false;
  std::string error;
  std::thread thread;

  void Start(const TcpTestSpec& spec, double deadline_s) {
    std::string e;
    listen = Listen("127.0.0.1", &port, &e);
    ASSERT_TRUE(listen.valid()) << e;
    thread = std::thread([this, spec, deadline_s] {
      ok = ServeTcpResponder(spec, listen.get(), Deadline::In(deadline_s), Deadline::In(deadline_s), &error);
    });
  }
  void Join() {
    if (thread.joinable()) thread.join();
  }
  ~Responder() { Join(); }
};

TcpTestSpec Spec(uint64_t id, int self, int peer, int64_t size, int streams) {
  TcpTestSpec s;
  s.test_id = id;
  s.self = self;
  s.peer = peer;
  s.size = size;
  s.streams = streams;
  return s;
}

TEST(TcpProbe, MeasuresBothDirections) {
  Responder r;
  r.Start(Spec(7, 1, 0, 1 << 20, 3), 10);
  TestResult t;
  RunTcpInitiator(Spec(7, 0, 1, 1 << 20, 3), "127.0.0.1", r.port, Deadline::In(10), Deadline::In(10), &t);
  r.Join();
  ASSERT_TRUE(t.completed) << t.error;
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_GT(t.fwd_mbps, 0);
  EXPECT_GT(t.bwd_mbps, 0);
  EXPECT_GT(t.latency_us, 0);
  EXPECT_GT(t.time_s, 0);
  // time = size/fwd + size/bwd, within rounding.
  EXPECT_NEAR(t.time_s, (1 << 20) / t.fwd_mbps / 1e6 + (1 << 20) / t.bwd_mbps / 1e6, 1e-6);
}

TEST(TcpProbe, StaleConnectionOfAnEarlierTestIsRejected) {
  Responder r;
  r.Start(Spec(9, 1, 0, 256 << 10, 2), 10);
  // A late data stream of test 8 arrives first.
  std::string e;
  Fd stale = Connect("127.0.0.1", r.port, Deadline::In(5), &e);
  ASSERT_TRUE(stale.valid()) << e;
  unsigned char hello[24] = {'X', 'T', 'N', 'P', 'D', 'A', 'T', 'A'};
  hello[15] = 8;  // test id 8, big-endian
  ASSERT_TRUE(SendAll(stale.get(), hello, sizeof hello, Deadline::In(5), &e)) << e;
  TestResult t;
  RunTcpInitiator(Spec(9, 0, 1, 256 << 10, 2), "127.0.0.1", r.port, Deadline::In(10), Deadline::In(10), &t);
  r.Join();
  EXPECT_TRUE(t.completed) << t.error;
  EXPECT_TRUE(r.ok) << r.error;
}

TEST(TcpProbe, ResponderGivesUpWhenNobodyComes) {
  Responder r;
  double t0 = MonotonicS();
  r.Start(Spec(3, 1, 0, 1024, 1), 0.2);
  r.Join();
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("waiting for node 0 to connect"), std::string::npos) << r.error;
  EXPECT_LT(MonotonicS() - t0, 5.0);
}

TEST(TcpProbe, InitiatorGivesUpOnAClosedPort) {
  int port = 0;
  std::string e;
  { Fd l = Listen("127.0.0.1", &port, &e); }
  TestResult t;
  RunTcpInitiator(Spec(1, 0, 1, 1024, 1), "127.0.0.1", port, Deadline::In(0.2), Deadline::In(0.2), &t);
  EXPECT_FALSE(t.completed);
  EXPECT_NE(t.error.find("gave up"), std::string::npos) << t.error;
}

TEST(TcpProbe, SizeMismatchFailsBothSidesWithAReason) {
  Responder r;
  r.Start(Spec(5, 1, 0, 1 << 20, 2), 5);
  TestResult t;
  RunTcpInitiator(Spec(5, 0, 1, 2 << 20, 2), "127.0.0.1", r.port, Deadline::In(5), Deadline::In(5), &t);
  r.Join();
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("expected"), std::string::npos) << r.error;
  EXPECT_FALSE(t.completed);
  EXPECT_FALSE(t.error.empty());
}

TEST(GpuHelpers, HexRoundTripAndRejects) {
  unsigned char in[128], out[128];
  for (int i = 0; i < 128; ++i) in[i] = static_cast<unsigned char>(i * 37 + 11);
  std::string hex = HexEncode(in, sizeof in);
  EXPECT_EQ(hex.size(), 256u);
  ASSERT_TRUE(HexDecode(hex, out, sizeof out));
  EXPECT_EQ(std::memcmp(in, out, sizeof in), 0);
  EXPECT_EQ(HexEncode("\x00\xff\x1a", 3), "00ff1a");
  EXPECT_FALSE(HexDecode(hex.substr(2), out, sizeof out));  // short
  std::string bad = hex;
  bad[10] = 'g';
  EXPECT_FALSE(HexDecode(bad, out, sizeof out));
  EXPECT_TRUE(HexDecode("00FF1A", out, 3));
  EXPECT_EQ(out[1], 0xff);
}

TEST(GpuHelpers, NcclTestsBusBandwidth) {
  // nccl-tests: busbw = algbw x 2(n-1)/n for allreduce.
  EXPECT_DOUBLE_EQ(AllReduceBusBandwidth(1e9, 1.0, 2), 1000.0);  // 2 ranks: busbw = algbw
  EXPECT_DOUBLE_EQ(AllReduceBusBandwidth(1e9, 1.0, 8), 1750.0);
  EXPECT_DOUBLE_EQ(AllReduceBusBandwidth(1e9, 0.5, 4), 3000.0);
  EXPECT_EQ(AllReduceBusBandwidth(1e9, 0, 2), 0);
  EXPECT_EQ(AllReduceBusBandwidth(1e9, 1, 0), 0);
}

TEST(GpuHelpers, WorkerModeRejectsBadArguments) {
  EXPECT_EQ(RunGpuWorker({}), 2);
  EXPECT_EQ(RunGpuWorker({"nccl", "2", "1024", "5"}), 2);  // rank must be 0 or 1
  EXPECT_EQ(RunGpuWorker({"nccl", "0", "2", "5"}), 2);     // under one float
  EXPECT_EQ(RunGpuWorker({"local", "x", "5"}), 2);
  EXPECT_EQ(RunGpuWorker({"format-disk"}), 2);
}

}  // namespace
}  // namespace xtimer::netprobe
