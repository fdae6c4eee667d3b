// The rendezvous wire format: every kind of bad input gives a clear error, never a crash or hang.
#include "netprobe/wire.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "common/clock.h"
#include "netprobe/messages.h"

namespace xtimer::netprobe {
namespace {

using namespace xtimer::net;  // the sockets under test (common/net)

using nlohmann::json;

std::string Header(const char* magic, uint32_t n) {
  std::string h(magic, 4);
  for (int i = 3; i >= 0; --i) h += static_cast<char>((n >> (8 * i)) & 0xff);
  return h;
}

TEST(Wire, RoundTripInPieces) {
  json msg = {{"type", "join"}, {"rank", 3}, {"host", "n\xc3\xa9ud"}};
  std::string frame = EncodeFrame(msg) + EncodeFrame({{"type", "bye"}});
  FrameDecoder d;
  json out;
  std::string e;
  // Byte by byte: a frame is only complete at its last byte.
  size_t frames = 0;
  for (char c : frame) {
    d.Feed(&c, 1);
    auto s = d.Next(&out, &e);
    ASSERT_NE(s, FrameDecoder::Status::kError) << e;
    if (s == FrameDecoder::Status::kFrame) {
      ++frames;
      if (frames == 1) {
        EXPECT_EQ(out, msg);
      } else {
        EXPECT_EQ(out["type"], "bye");
      }
    }
  }
  EXPECT_EQ(frames, 2u);
  EXPECT_EQ(d.buffered(), 0u);
}

TEST(Wire, BadMagicIsRejectedAtOnce) {
  FrameDecoder d;
  json out;
  std::string e;
  d.Feed("GE", 2);
  EXPECT_EQ(d.Next(&out, &e), FrameDecoder::Status::kError);
  EXPECT_NE(e.find("not an xtimer_netprobe peer"), std::string::npos) << e;
}

TEST(Wire, OversizedAndEmptyFrames) {
  for (uint32_t n : {kMaxPayload + 1, 0xffffffffu, 0u}) {
    FrameDecoder d;
    json out;
    std::string e;
    std::string h = Header("XTNP", n);
    d.Feed(h.data(), h.size());
    EXPECT_EQ(d.Next(&out, &e), FrameDecoder::Status::kError) << n;
    EXPECT_FALSE(e.empty());
  }
}

TEST(Wire, MalformedPayloads) {
  for (std::string payload :
       {std::string("{not json"), std::string("[1,2]"), std::string("{}"), std::string("{\"type\":7}"),
        std::string("\"x\""), std::string("{\"type\":\"a\"}trailing")}) {
    FrameDecoder d;
    json out;
    std::string e;
    std::string f = Header("XTNP", payload.size()) + payload;
    d.Feed(f.data(), f.size());
    EXPECT_EQ(d.Next(&out, &e), FrameDecoder::Status::kError) << payload;
    EXPECT_NE(e.find("malformed"), std::string::npos) << e;
  }
}

TEST(Wire, TruncatedFrameWaitsForMore) {
  std::string f = EncodeFrame({{"type", "x"}});
  FrameDecoder d;
  json out;
  std::string e;
  d.Feed(f.data(), f.size() - 1);
  EXPECT_EQ(d.Next(&out, &e), FrameDecoder::Status::kNeedMore);
}

TEST(Wire, FieldsAreCheckedAndNamed) {
  json m = {{"type", "result"}, {"id", 5},   {"ok", "yes"},
            {"big", 1e300},     {"neg", -4}, {"name", std::string(5000, 'a')}};
  std::string e;
  Fields f(m, &e);
  int64_t id = 0;
  EXPECT_TRUE(f.Int("id", 0, 10, &id));
  EXPECT_EQ(id, 5);
  bool ok;
  EXPECT_FALSE(f.Bool("ok", &ok));
  EXPECT_EQ(e, "message 'result': field 'ok' is not true/false");
  int i;
  EXPECT_FALSE(f.Int("missing", 0, 1, &i));
  EXPECT_NE(e.find("'missing' is missing"), std::string::npos);
  EXPECT_FALSE(f.Int("neg", 0, 100, &i));
  EXPECT_NE(e.find("out of range"), std::string::npos);
  EXPECT_FALSE(f.Int("big", 0, 100, &i));
  std::string s;
  EXPECT_FALSE(f.Str("name", &s));
  EXPECT_NE(e.find("too long"), std::string::npos);
  double d;
  EXPECT_TRUE(f.Num("big", &d));
}

// Over a real socket pair: garbage, a truncated message and silence all end in an error.
class WireSocket : public ::testing::Test {
 protected:
  void SetUp() override {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    a_.reset(sv[0]);
    b_.reset(sv[1]);
  }
  Fd a_, b_;
};

TEST_F(WireSocket, MessageArrives) {
  std::string e;
  ASSERT_TRUE(SendMessage(a_.get(), {{"type", "ping"}, {"n", 1}}, Deadline::In(1), &e)) << e;
  json m;
  ASSERT_TRUE(RecvMessage(b_.get(), &m, Deadline::In(1), &e)) << e;
  EXPECT_EQ(m["n"], 1);
}

TEST_F(WireSocket, GarbageGivesOneLine) {
  std::string junk = "HTTP/1.1 200 OK\r\n\r\n";
  write(a_.get(), junk.data(), junk.size());
  json m;
  std::string e;
  EXPECT_FALSE(RecvMessage(b_.get(), &m, Deadline::In(1), &e));
  EXPECT_NE(e.find("not an xtimer_netprobe peer"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
}

TEST_F(WireSocket, TruncatedThenClosed) {
  std::string f = EncodeFrame({{"type", "result"}, {"text", std::string(100, 'x')}});
  write(a_.get(), f.data(), f.size() / 2);
  a_.reset();
  json m;
  std::string e;
  EXPECT_FALSE(RecvMessage(b_.get(), &m, Deadline::In(1), &e));
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

TEST_F(WireSocket, OversizedLengthIsNotAllocated) {
  std::string h = Header("XTNP", 0xfffffff0u);
  write(a_.get(), h.data(), h.size());
  json m;
  std::string e;
  EXPECT_FALSE(RecvMessage(b_.get(), &m, Deadline::In(1), &e));
  EXPECT_NE(e.find("exceeds the limit"), std::string::npos) << e;
}

TEST_F(WireSocket, SilenceHitsTheDeadline) {
  json m;
  std::string e;
  double t0 = MonotonicS();
  EXPECT_FALSE(RecvMessage(b_.get(), &m, Deadline::In(0.1), &e));
  EXPECT_NE(e.find("timed out"), std::string::npos) << e;
  EXPECT_LT(MonotonicS() - t0, 5.0);  // bounded, generously
}

TEST_F(WireSocket, PeerThatNeverReadsHitsTheSendDeadline) {
  std::string big(4 << 20, 'x');
  std::string e;
  EXPECT_FALSE(SendAll(a_.get(), big.data(), big.size(), Deadline::In(0.1), &e));
  EXPECT_NE(e.find("timed out"), std::string::npos) << e;
}

TEST(Net, ConnectToNothingGivesUpAtTheDeadline) {
  // Bind a port, close it: connecting is refused until the deadline.
  int port = 0;
  std::string e;
  {
    Fd l = Listen("127.0.0.1", &port, &e);
    ASSERT_TRUE(l.valid()) << e;
  }
  Fd c = Connect("127.0.0.1", port, Deadline::In(0.2), &e);
  EXPECT_FALSE(c.valid());
  EXPECT_NE(e.find("gave up"), std::string::npos) << e;
}

TEST(Net, LocalAddresses) {
  EXPECT_TRUE(IsLocalAddress("127.0.0.1"));
  EXPECT_TRUE(IsLocalAddress("localhost"));
  EXPECT_FALSE(IsLocalAddress("192.0.2.77"));  // TEST-NET-1, never configured
}

}  // namespace
}  // namespace xtimer::netprobe
