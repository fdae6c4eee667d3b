// The tcp backend over loopback (two threads), and the pure helpers of the nccl backend.
#include "netprobe/tcp_probe.h"

#include <gtest/gtest.h>

#include <unistd.h>

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
  StoppedTransfer partial;
  RunTcpInitiator(Spec(7, 0, 1, 1 << 20, 3), "127.0.0.1", r.port, Deadline::In(10), Deadline::In(10), StopWatch{}, &t,
                  &partial);
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

// A transfer far too big for its deadline, stopped on request: the initiator reports the bytes
// the responder had, the responder ends the test cleanly.
TEST(TcpProbe, StopsOnRequestAndReportsTheBytesMoved) {
  const int64_t size = int64_t{64} << 30;
  Responder r;
  r.Start(Spec(3, 1, 0, size, 2), 20);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  Fd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  ASSERT_EQ(write(write_end.get(), "s", 1), 1);  // asked at once: honoured after kMinSampleS
  int checks = 0;
  StopWatch stop{read_end.get(), [&](std::string*) {
                   char c;
                   EXPECT_EQ(read(read_end.get(), &c, 1), 1);
                   ++checks;
                   return StopWatch::Answer::kStop;
                 }};
  TestResult t;
  StoppedTransfer partial;
  double t0 = MonotonicS();
  RunTcpInitiator(Spec(3, 0, 1, size, 2), "127.0.0.1", r.port, Deadline::In(20), Deadline::In(20), stop, &t, &partial);
  double took = MonotonicS() - t0;
  r.Join();
  EXPECT_TRUE(r.ok) << r.error;
  ASSERT_TRUE(t.stopped) << t.error;
  EXPECT_FALSE(t.completed);
  EXPECT_EQ(checks, 1);
  EXPECT_GT(t.latency_us, 0);
  EXPECT_GT(partial.fwd_bytes, 0);
  EXPECT_LT(partial.fwd_bytes, size);
  EXPECT_GE(partial.fwd_s, kMinSampleS * 0.9);
  EXPECT_LT(took, 15);
  EXPECT_EQ(partial.bwd_bytes, 0);
  EXPECT_EQ(partial.bwd_s, 0);
  TestResult judged;
  std::string error;
  ASSERT_TRUE(PartialResult(partial, took, &judged, &error)) << error;
  EXPECT_TRUE(judged.completed);
  EXPECT_GT(judged.time_s, took);
}

// A watch that reads something else (a progress message) goes on; a failing one fails the test.
TEST(TcpProbe, AWatchThatFailsFailsTheTest) {
  const int64_t size = int64_t{64} << 30;
  Responder r;
  r.Start(Spec(4, 1, 0, size, 1), 20);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  Fd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  ASSERT_EQ(write(write_end.get(), "ab", 2), 2);
  StopWatch stop{read_end.get(), [&](std::string* e) {
                   char c;
                   EXPECT_EQ(read(read_end.get(), &c, 1), 1);
                   if (c == 'a') return StopWatch::Answer::kGoOn;
                   *e = "lost the rendezvous: test";
                   return StopWatch::Answer::kError;
                 }};
  TestResult t;
  StoppedTransfer partial;
  RunTcpInitiator(Spec(4, 0, 1, size, 1), "127.0.0.1", r.port, Deadline::In(20), Deadline::In(20), stop, &t, &partial);
  EXPECT_FALSE(t.completed);
  EXPECT_FALSE(t.stopped);
  EXPECT_NE(t.error.find("lost the rendezvous: test"), std::string::npos) << t.error;
  // The responder sees its peer go away.
  r.Join();
  EXPECT_FALSE(r.ok);
}

// The initiator's side by hand: a request to stop that crosses the last bytes of a transfer is
// still answered ("done", then "stopped"), so the initiator never waits for an answer in vain.
TEST(TcpProbe, AStopThatCrossesTheLastBytesIsAnswered) {
  const int64_t size = 64 << 10;
  Responder r;
  r.Start(Spec(11, 1, 0, size, 1), 10);
  auto be = [](unsigned char* p, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(v >> (8 * (n - 1 - i)));
  };
  std::string e;
  Fd conns[2];
  for (uint32_t stream = 0; stream < 2; ++stream) {
    conns[stream] = Connect("127.0.0.1", r.port, Deadline::In(5), &e);
    ASSERT_TRUE(conns[stream].valid()) << e;
    unsigned char hello[24] = {'X', 'T', 'N', 'P', 'D', 'A', 'T', 'A'};
    be(hello + 8, 11, 8);
    be(hello + 16, 0, 4);
    be(hello + 20, stream, 4);
    ASSERT_TRUE(SendAll(conns[stream].get(), hello, sizeof hello, Deadline::In(5), &e)) << e;
  }
  auto cmd = [&](uint32_t op, uint64_t arg) {
    unsigned char c[16] = {};
    be(c, op, 4);
    be(c + 8, arg, 8);
    return SendAll(conns[0].get(), c, sizeof c, Deadline::In(5), &e);
  };
  auto reply = [&]() {
    unsigned char c[16];
    if (!RecvAll(conns[0].get(), c, sizeof c, Deadline::In(5), &e)) return uint32_t{0};
    return static_cast<uint32_t>(c[3]);
  };
  ASSERT_TRUE(cmd(2, size)) << e;  // recv
  std::string bytes(size, 'x');
  ASSERT_TRUE(SendAll(conns[1].get(), bytes.data(), bytes.size(), Deadline::In(5), &e)) << e;
  ASSERT_TRUE(cmd(6, 0)) << e;  // stop
  EXPECT_EQ(reply(), 3u) << e;  // done
  EXPECT_EQ(reply(), 7u) << e;  // stopped
  ASSERT_TRUE(cmd(5, 0)) << e;  // bye
  EXPECT_EQ(reply(), 5u) << e;
  r.Join();
  EXPECT_TRUE(r.ok) << r.error;
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
  StoppedTransfer partial;
  RunTcpInitiator(Spec(9, 0, 1, 256 << 10, 2), "127.0.0.1", r.port, Deadline::In(10), Deadline::In(10), StopWatch{}, &t,
                  &partial);
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
  StoppedTransfer partial;
  RunTcpInitiator(Spec(1, 0, 1, 1024, 1), "127.0.0.1", port, Deadline::In(0.2), Deadline::In(0.2), StopWatch{}, &t,
                  &partial);
  EXPECT_FALSE(t.completed);
  EXPECT_NE(t.error.find("gave up"), std::string::npos) << t.error;
}

TEST(TcpProbe, SizeMismatchFailsBothSidesWithAReason) {
  Responder r;
  r.Start(Spec(5, 1, 0, 1 << 20, 2), 5);
  TestResult t;
  StoppedTransfer partial;
  RunTcpInitiator(Spec(5, 0, 1, 2 << 20, 2), "127.0.0.1", r.port, Deadline::In(5), Deadline::In(5), StopWatch{}, &t,
                  &partial);
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
