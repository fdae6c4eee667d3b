// The HTTP server of our tools (the node agent's /metrics, the collector's --http): cpp-httplib's
// request parsing and routing, with connection handling of our own so that slow or hostile
// clients cannot hold it.
//
// cpp-httplib 0.11 times out each read (5 s) but not a request: a client that sends one header
// line a second keeps its worker forever, four of them blocked the collector's four workers, and
// its stop() waits for every worker. Here:
//   - a request must arrive whole within request_timeout_s, counted from the moment its
//     connection was accepted (time spent queued for a worker counts: a connection that waited
//     too long is closed at once) or, on a kept-alive connection, from its first byte;
//   - at most max_request_bytes are read per request (header and body);
//   - every write has write_timeout_s, a connection lives at most connection_max_s;
//   - keep-alive waits idle_timeout_s for the next request, and not at all while another
//     connection waits for a worker;
//   - Shutdown() closes the listening socket and makes every open connection give up at once:
//     it never waits on a client (only on a handler that is running, which is ours and short);
//   - an error response (status >= 400, e.g. 400 for a request that does not parse) says
//     "Connection: close" and closes the connection: what follows it is never read as requests;
//   - Range is ignored: every answer is the whole resource (200), as Prometheus and browsers
//     fetch our pages (httplib 0.11 answered 1,000 ranges of a 5 KB page with 144 KB);
//   - a Content-Length that is not one decimal number (say "-1") is answered 400.
// Handlers are registered as on httplib::Server (Get, ...), before Start().
//
// Threads: one listener, `workers` workers (each serves one connection at a time).
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstddef>
#include <string>
#include <thread>

namespace xtimer {

struct HttpLimits {
  size_t workers = 32;
  double request_timeout_s = 5;
  double idle_timeout_s = 5;
  double write_timeout_s = 10;
  double connection_max_s = 120;
  size_t max_request_bytes = 64 << 10;
  size_t keep_alive_max = 100;
};

class GuardedHttpServer : public httplib::Server {
 public:
  explicit GuardedHttpServer(HttpLimits limits = {});
  ~GuardedHttpServer() override;  // Shutdown()
  GuardedHttpServer(const GuardedHttpServer&) = delete;
  GuardedHttpServer& operator=(const GuardedHttpServer&) = delete;

  // Binds host:port (port 0: a free one; SO_REUSEADDR, never a port shared with another server)
  // and serves from its own threads. False when it cannot bind.
  bool Start(const std::string& host, int port);
  int port() const { return port_; }
  // Stops accepting, closes every connection (waiting or served), joins every thread. Idempotent.
  void Shutdown();

  struct Pool;  // the workers (http_server.cc)

 private:
  // httplib calls this (a virtual of httplib::Server) for every accepted connection.
  bool process_and_close_socket(socket_t sock) override;

  const HttpLimits limits_;
  int wake_[2] = {-1, -1};  // a pipe, readable once Shutdown() began: every wait includes it
  std::atomic<bool> stopping_{false};
  std::atomic<Pool*> pool_{nullptr};
  std::thread listener_;
  int port_ = 0;
};

}  // namespace xtimer
