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
#pragma once

#include <cstdint>
#include <string>

#include "netprobe/judge.h"
#include "common/net/net.h"

namespace xtimer::netprobe {

struct TcpTestSpec {
  uint64_t test_id = 0;
  int self = 0, peer = 0;
  int64_t size = 0;
  int streams = 4;
};

// Runs the initiator side against host:port. Fills time/bandwidth/latency of *out and sets
// out->completed, or out->error.
void RunTcpInitiator(const TcpTestSpec& spec, const std::string& host, int port, net::Deadline connect_deadline,
                     net::Deadline deadline, TestResult* out);

// Serves one test on `listen_fd`: accepts the initiator's connections, answers its commands.
bool ServeTcpResponder(const TcpTestSpec& spec, int listen_fd, net::Deadline accept_deadline, net::Deadline deadline,
                       std::string* error);

}  // namespace xtimer::netprobe
