// The tcp backend: one test between two nodes over plain sockets, straight between the nodes
// (never through the rendezvous). The initiator opens a control connection and `streams` data
// connections to the responder's probe port, then measures
//   - latency: 20 ping-pongs of 16 bytes on the control connection (half the median round trip),
//   - forward: `size` bytes initiator -> responder spread over the data streams, until the
//     responder confirms it has them all,
//   - backward: `size` bytes responder -> initiator, until the last byte arrived.
// Every connection starts with a hello naming the test, so a late connection of an earlier test
// is recognised and closed. Connecting (and, on the responder, accepting every connection) must
// be done by the connect deadline, so that a peer that silently drops packets costs that much;
// everything runs against the test's deadline.
//
// Early stop (early_stop.h): while bytes move, the initiator watches a file descriptor (its
// rendezvous connection). When the rendezvous asks it to stop, and the transfer under way has
// been measured for kMinSampleS, it sends "stop" on the control connection; the responder, which
// watches the control connection while bytes move, stops and answers with the bytes it had
// received and its seconds for them. The initiator then reports a StoppedTransfer instead of
// figures.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "netprobe/early_stop.h"
#include "netprobe/judge.h"
#include "common/net/net.h"

namespace xtimer::netprobe {

struct TcpTestSpec {
  uint64_t test_id = 0;
  int self = 0, peer = 0;
  int64_t size = 0;
  int streams = 4;
};

// What the initiator watches for a request to stop: `fd` is polled while bytes move; when it is
// readable, `check` reads what arrived and answers.
struct StopWatch {
  enum class Answer { kGoOn, kStop, kError };
  int fd = -1;  // -1: never stopped
  std::function<Answer(std::string* error)> check;
};

// Runs the initiator side against host:port. Fills time/bandwidth/latency of *out and sets
// out->completed, or out->error. When stopped early: out->stopped, out->latency_us and *partial.
void RunTcpInitiator(const TcpTestSpec& spec, const std::string& host, int port, net::Deadline connect_deadline,
                     net::Deadline deadline, const StopWatch& stop, TestResult* out, StoppedTransfer* partial);

// Serves one test on `listen_fd`: accepts the initiator's connections, answers its commands.
bool ServeTcpResponder(const TcpTestSpec& spec, int listen_fd, net::Deadline accept_deadline, net::Deadline deadline,
                       std::string* error);

}  // namespace xtimer::netprobe
