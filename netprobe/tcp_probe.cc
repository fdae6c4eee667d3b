#include "netprobe/tcp_probe.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <vector>

#include "common/clock.h"

namespace xtimer::netprobe {
namespace {

constexpr char kHelloMagic[8] = {'X', 'T', 'N', 'P', 'D', 'A', 'T', 'A'};
constexpr size_t kHelloBytes = 24;
constexpr size_t kCmdBytes = 16;
constexpr int kPings = 20;
constexpr size_t kChunk = 256 << 10;

// kStop: the initiator asks the responder to stop the transfer under way (early stop);
// kStopped: the responder's answer, arg = bytes it had received (or sent), aux = its milliseconds.
enum Op : uint32_t { kPing = 1, kRecv = 2, kDone = 3, kSend = 4, kBye = 5, kStop = 6, kStopped = 7 };

void Put32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (24 - 8 * i));
}
void Put64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (56 - 8 * i));
}
uint32_t Get32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | p[i];
  return v;
}
uint64_t Get64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

// A command: op (4 bytes), aux (4 bytes), arg (8 bytes), big-endian.
struct Cmd {
  Op op = kPing;
  uint64_t arg = 0;
  uint32_t aux = 0;
};

bool SendCmd(int fd, Op op, uint64_t arg, net::Deadline d, std::string* error, uint32_t aux = 0) {
  unsigned char c[kCmdBytes] = {};
  Put32(c, op);
  Put32(c + 4, aux);
  Put64(c + 8, arg);
  return net::SendAll(fd, c, sizeof c, d, error);
}

bool RecvCmd(int fd, Cmd* cmd, net::Deadline d, std::string* error) {
  unsigned char c[kCmdBytes];
  if (!net::RecvAll(fd, c, sizeof c, d, error)) return false;
  uint32_t o = Get32(c);
  if (o < kPing || o > kStopped) {
    *error = "probe peer sent an unknown command " + std::to_string(o);
    return false;
  }
  cmd->op = static_cast<Op>(o);
  cmd->aux = Get32(c + 4);
  cmd->arg = Get64(c + 8);
  return true;
}

bool RecvCmd(int fd, Op* op, uint64_t* arg, net::Deadline d, std::string* error) {
  Cmd c;
  if (!RecvCmd(fd, &c, d, error)) return false;
  *op = c.op;
  *arg = c.arg;
  return true;
}

uint32_t Millis(double s) { return static_cast<uint32_t>(std::clamp(s * 1000.0, 0.0, 4294967295.0)); }

// Bytes stream i carries out of `size` over n streams.
uint64_t Share(int64_t size, int n, int i) {
  uint64_t base = static_cast<uint64_t>(size) / n;
  return base + (i == n - 1 ? static_cast<uint64_t>(size) % n : 0);
}

const std::vector<char>& Pattern() {
  static const std::vector<char> buf = [] {
    std::vector<char> b(kChunk);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<char>(i * 131 + 7);
    return b;
  }();
  return buf;
}

// What a wait watches besides its own sockets: a request to stop. Once `check` said stop
// (*asked, kept for the whole test), the wait ends as soon as the transfer that began at `since`
// has been measured for `min_sample_s`.
struct Watch {
  int fd = -1;
  std::function<StopWatch::Answer(std::string*)> check;
  double since = 0;
  double min_sample_s = 0;
  bool asked = false;

  bool due() const { return asked && MonotonicS() - since >= min_sample_s; }
  // Poll timeout: the deadline's, or sooner when a stop falls due.
  int poll_ms(net::Deadline deadline) const {
    int ms = deadline.poll_ms();
    if (!asked) return ms;
    double left = since + min_sample_s - MonotonicS();
    return std::min(ms, std::max(0, static_cast<int>(left * 1000) + 1));
  }
  // Called when fd is readable: false with *error when the watched channel failed.
  bool Read(std::string* error) {
    StopWatch::Answer a = check(error);
    if (a == StopWatch::Answer::kError) return false;
    if (a == StopWatch::Answer::kStop) asked = true;
    return true;
  }
};

enum class End { kDone, kStopped, kFailed };

// Sends (or receives) share(i) bytes on every stream at once until done, stopped (`watch`, may
// be null) or the deadline. *moved: the bytes moved so far.
End Pump(const std::vector<net::Fd>& fds, int64_t size, bool sending, net::Deadline deadline, Watch* watch,
         uint64_t* moved, std::string* error) {
  const int n = static_cast<int>(fds.size());
  std::vector<uint64_t> left(n);
  for (int i = 0; i < n; ++i) left[i] = Share(size, n, i);
  *moved = 0;
  std::vector<char> scratch(sending ? 0 : kChunk);
  const std::vector<char>& pattern = Pattern();
  for (;;) {
    std::vector<pollfd> pfds;
    std::vector<int> which;
    for (int i = 0; i < n; ++i) {
      if (left[i] == 0) continue;
      pfds.push_back({fds[i].get(), static_cast<short>(sending ? POLLOUT : POLLIN), 0});
      which.push_back(i);
    }
    if (pfds.empty()) return End::kDone;
    if (watch != nullptr && watch->due()) return End::kStopped;
    const bool watching = watch != nullptr && !watch->asked && watch->fd >= 0;
    if (watching) pfds.push_back({watch->fd, POLLIN, 0});
    int r = poll(pfds.data(), pfds.size(), watch != nullptr ? watch->poll_ms(deadline) : deadline.poll_ms());
    if (r < 0) {
      if (errno == EINTR) continue;
      *error = std::string("poll: ") + std::strerror(errno);
      return End::kFailed;
    }
    if (r == 0 && deadline.passed()) {
      uint64_t total = 0;
      for (uint64_t l : left) total += l;
      *error = std::string(sending ? "sending" : "receiving") + " timed out with " + std::to_string(total) + " of " +
               std::to_string(size) + " bytes left";
      return End::kFailed;
    }
    for (size_t k = 0; k < which.size(); ++k) {
      if (pfds[k].revents == 0) continue;
      int i = which[k];
      size_t want = static_cast<size_t>(std::min<uint64_t>(left[i], kChunk));
      ssize_t got = sending ? send(fds[i].get(), pattern.data(), want, MSG_NOSIGNAL)
                            : recv(fds[i].get(), scratch.data(), want, 0);
      if (got > 0) {
        left[i] -= static_cast<uint64_t>(got);
        *moved += static_cast<uint64_t>(got);
      } else if (got == 0 && !sending) {
        *error = "stream " + std::to_string(i + 1) + " closed by " + net::PeerString(fds[i].get()) + " with " +
                 std::to_string(left[i]) + " bytes missing";
        return End::kFailed;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        *error = std::string(sending ? "send" : "recv") + " on stream " + std::to_string(i + 1) + ": " +
                 std::strerror(errno);
        return End::kFailed;
      }
    }
    if (watching && pfds.back().revents != 0 && !watch->Read(error)) return End::kFailed;
  }
}

// Waits for the peer's next command on `control`, or for a stop that falls due (`watch`).
End AwaitCmd(int control, net::Deadline deadline, Watch* watch, Cmd* cmd, std::string* error) {
  for (;;) {
    if (watch->due()) return End::kStopped;
    pollfd pfds[2] = {{control, POLLIN, 0}, {watch->fd, POLLIN, 0}};
    const nfds_t count = !watch->asked && watch->fd >= 0 ? 2 : 1;
    int r = poll(pfds, count, watch->poll_ms(deadline));
    if (r < 0) {
      if (errno == EINTR) continue;
      *error = std::string("poll: ") + std::strerror(errno);
      return End::kFailed;
    }
    if (r == 0 && deadline.passed()) {
      *error = "no answer from the peer before the deadline";
      return End::kFailed;
    }
    if (pfds[0].revents != 0) return RecvCmd(control, cmd, deadline, error) ? End::kDone : End::kFailed;
    if (count == 2 && pfds[1].revents != 0 && !watch->Read(error)) return End::kFailed;
  }
}

std::string Hello(const TcpTestSpec& s, uint32_t stream) {
  unsigned char h[kHelloBytes];
  std::memcpy(h, kHelloMagic, 8);
  Put64(h + 8, s.test_id);
  Put32(h + 16, static_cast<uint32_t>(s.self));
  Put32(h + 20, stream);
  return std::string(reinterpret_cast<char*>(h), sizeof h);
}

}  // namespace

void RunTcpInitiator(const TcpTestSpec& spec, const std::string& host, int port, net::Deadline connect_deadline,
                     net::Deadline deadline, const StopWatch& stop, TestResult* out, StoppedTransfer* partial) {
  out->completed = false;
  out->stopped = false;
  std::string error;
  auto fail = [&](const std::string& what) { out->error = what; };

  connect_deadline = net::Deadline::Earlier(connect_deadline, deadline);
  net::Fd control = net::Connect(host, port, connect_deadline, &error);
  if (!control.valid()) return fail(error);
  std::string hello = Hello(spec, 0);
  if (!net::SendAll(control.get(), hello.data(), hello.size(), deadline, &error)) return fail(error);
  std::vector<net::Fd> data;
  for (int i = 1; i <= spec.streams; ++i) {
    net::Fd fd = net::Connect(host, port, connect_deadline, &error);
    if (!fd.valid()) return fail("data stream " + std::to_string(i) + ": " + error);
    hello = Hello(spec, static_cast<uint32_t>(i));
    if (!net::SendAll(fd.get(), hello.data(), hello.size(), deadline, &error)) return fail(error);
    data.push_back(std::move(fd));
  }

  // Latency: ping-pong on the control connection.
  std::vector<double> rtts;
  for (int i = 0; i <= kPings; ++i) {
    double t0 = MonotonicS();
    Op op;
    uint64_t arg;
    if (!SendCmd(control.get(), kPing, i, deadline, &error) || !RecvCmd(control.get(), &op, &arg, deadline, &error))
      return fail("latency: " + error);
    if (op != kPing || arg != static_cast<uint64_t>(i)) return fail("latency: wrong echo from peer");
    if (i > 0) rtts.push_back(MonotonicS() - t0);  // the first one warms up
  }
  out->latency_us = Median(rtts) / 2 * 1e6;

  // Forward: we send, the peer confirms. Backward: the peer sends, we receive. Either may be
  // stopped early; then the receiver's count is what was moved.
  Watch watch{stop.fd, stop.check, 0, kMinSampleS};
  StoppedTransfer moved;
  moved.size = spec.size;
  // Asks the peer to stop and reads its answer: its bytes received when the forward transfer
  // was stopped (or all of them, when its confirmation crossed our request).
  auto stopped = [&](bool forward, double t0) {
    if (!SendCmd(control.get(), kStop, 0, deadline, &error)) return fail("stop: " + error);
    for (;;) {
      Cmd c;
      if (!RecvCmd(control.get(), &c, deadline, &error)) return fail("stop: " + error);
      if (c.op == kDone) {  // the transfer ended before our request arrived
        if (forward && moved.fwd_s == 0) {
          moved.fwd_bytes = spec.size;
          moved.fwd_s = std::max(MonotonicS() - t0, 1e-6);
        }
        continue;
      }
      if (c.op != kStopped) return fail("stop: unexpected reply from peer");
      if (forward && moved.fwd_s == 0) {
        if (c.arg > static_cast<uint64_t>(spec.size) || (c.arg > 0 && c.aux == 0))
          return fail("stop: peer answered with " + std::to_string(c.arg) + " bytes in " + std::to_string(c.aux) +
                      " ms, of " + std::to_string(spec.size));
        moved.fwd_bytes = static_cast<int64_t>(c.arg);
        moved.fwd_s = c.aux / 1000.0;
      }
      break;
    }
    Op op;
    uint64_t arg;
    if (SendCmd(control.get(), kBye, 0, deadline, &error)) RecvCmd(control.get(), &op, &arg, deadline, &error);
    out->stopped = true;
    *partial = moved;
  };

  double t0 = MonotonicS();
  watch.since = t0;
  uint64_t count = 0;
  if (!SendCmd(control.get(), kRecv, static_cast<uint64_t>(spec.size), deadline, &error)) return fail(error);
  End end = Pump(data, spec.size, true, deadline, &watch, &count, &error);
  if (end == End::kFailed) return fail("forward: " + error);
  if (end == End::kStopped) return stopped(true, t0);
  Cmd reply;
  end = AwaitCmd(control.get(), deadline, &watch, &reply, &error);
  if (end == End::kFailed) return fail("forward: " + error);
  if (end == End::kStopped) return stopped(true, t0);
  if (reply.op != kDone || reply.arg != static_cast<uint64_t>(spec.size))
    return fail("forward: peer confirmed the wrong amount");
  double fwd = MonotonicS() - t0;
  moved.fwd_bytes = spec.size;
  moved.fwd_s = std::max(fwd, 1e-6);

  t0 = MonotonicS();
  watch.since = t0;
  if (!SendCmd(control.get(), kSend, static_cast<uint64_t>(spec.size), deadline, &error)) return fail(error);
  end = Pump(data, spec.size, false, deadline, &watch, &count, &error);
  if (end == End::kFailed) return fail("backward: " + error);
  if (end == End::kStopped) {
    moved.bwd_bytes = static_cast<int64_t>(count);
    moved.bwd_s = MonotonicS() - t0;
    return stopped(false, t0);
  }
  double bwd = MonotonicS() - t0;
  Op op;
  uint64_t arg;
  if (!RecvCmd(control.get(), &op, &arg, deadline, &error)) return fail("backward: " + error);
  if (op != kDone) return fail("backward: unexpected reply from peer");

  if (!SendCmd(control.get(), kBye, 0, deadline, &error) || !RecvCmd(control.get(), &op, &arg, deadline, &error) ||
      op != kBye) {
    // The figures are in; a lost goodbye does not fail the test.
  }
  fwd = std::max(fwd, 1e-9);
  bwd = std::max(bwd, 1e-9);
  out->time_s = fwd + bwd;
  out->fwd_mbps = static_cast<double>(spec.size) / fwd / 1e6;
  out->bwd_mbps = static_cast<double>(spec.size) / bwd / 1e6;
  out->completed = true;
}

bool ServeTcpResponder(const TcpTestSpec& spec, int listen_fd, net::Deadline accept_deadline, net::Deadline deadline,
                       std::string* error) {
  accept_deadline = net::Deadline::Earlier(accept_deadline, deadline);
  net::Fd control;
  std::vector<net::Fd> data(spec.streams);
  int have = 0;
  std::string why_rejected;
  while (have < spec.streams + 1) {
    std::string err;
    net::Fd fd = net::Accept(listen_fd, accept_deadline, &err);
    if (!fd.valid()) {
      *error = "waiting for node " + std::to_string(spec.peer) + " to connect: " + err +
               (why_rejected.empty() ? "" : " (rejected: " + why_rejected + ")");
      return false;
    }
    unsigned char h[kHelloBytes];
    // A hello is sent right after connecting; do not let a silent connection stall the test.
    net::Deadline hello_deadline = net::Deadline::Earlier(deadline, net::Deadline::In(2.0));
    if (!net::RecvAll(fd.get(), h, sizeof h, hello_deadline, &err)) {
      why_rejected = "a connection from " + net::PeerString(fd.get()) + " sent no hello: " + err;
      continue;
    }
    uint64_t id = Get64(h + 8);
    uint32_t from = Get32(h + 16), stream = Get32(h + 20);
    if (std::memcmp(h, kHelloMagic, 8) != 0) {
      why_rejected = "a connection from " + net::PeerString(fd.get()) + " is not a probe stream";
      continue;
    }
    if (id != spec.test_id || from != static_cast<uint32_t>(spec.peer)) {
      why_rejected = "stale connection of test " + std::to_string(id);
      continue;  // a late connection of an earlier test
    }
    if (stream > static_cast<uint32_t>(spec.streams)) {
      *error = "node " + std::to_string(spec.peer) + " opened stream " + std::to_string(stream) + " of " +
               std::to_string(spec.streams);
      return false;
    }
    net::Fd& slot = stream == 0 ? control : data[stream - 1];
    if (slot.valid()) {
      *error = "node " + std::to_string(spec.peer) + " opened stream " + std::to_string(stream) + " twice";
      return false;
    }
    slot = std::move(fd);
    ++have;
  }

  // While bytes move, the control connection is watched for the initiator's request to stop.
  Watch watch;
  watch.fd = control.get();
  watch.check = [&](std::string* e) {
    Cmd c;
    if (!RecvCmd(control.get(), &c, deadline, e)) return StopWatch::Answer::kError;
    if (c.op != kStop) {
      *e = "peer sent command " + std::to_string(c.op) + " in the middle of a transfer";
      return StopWatch::Answer::kError;
    }
    return StopWatch::Answer::kStop;
  };
  for (;;) {
    Op op;
    uint64_t arg;
    if (!RecvCmd(control.get(), &op, &arg, deadline, error)) return false;
    switch (op) {
      case kPing:
        if (!SendCmd(control.get(), kPing, arg, deadline, error)) return false;
        break;
      case kRecv:
      case kSend: {
        if (static_cast<int64_t>(arg) != spec.size) {
          *error = "peer asked to move " + std::to_string(arg) + " bytes, expected " + std::to_string(spec.size);
          return false;
        }
        watch.asked = false;
        watch.since = MonotonicS();
        uint64_t moved = 0;
        End end = Pump(data, spec.size, op == kSend, deadline, &watch, &moved, error);
        if (end == End::kFailed) return false;
        bool ok = end == End::kStopped
                      ? SendCmd(control.get(), kStopped, moved, deadline, error, Millis(MonotonicS() - watch.since))
                      : SendCmd(control.get(), kDone, arg, deadline, error);
        // The request to stop came with the last bytes: it is answered too, after the "done".
        if (ok && end == End::kDone && watch.asked) ok = SendCmd(control.get(), kStopped, 0, deadline, error);
        if (!ok) return false;
        break;
      }
      case kStop:  // nothing under way (our confirmation crossed the request)
        if (!SendCmd(control.get(), kStopped, 0, deadline, error)) return false;
        break;
      case kBye: SendCmd(control.get(), kBye, 0, deadline, error); return true;
      case kDone:
      case kStopped: *error = "peer sent an unexpected command"; return false;
    }
  }
}

}  // namespace xtimer::netprobe
