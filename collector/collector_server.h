// xtimer_collector's network side: the gRPC service (common/proto/collector.proto) as a thin
// adapter over a CollectorCore, and the HTTP front end (/metrics, the page, the rounds' files).
// Neither header pulls in gRPC or cpp-httplib; both live in collector_server.cc / http_frontend.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "collector/collector_core.h"
#include "common/prometheus_text.h"

namespace xtimer::collector {

// "host:port" or "[v6]:port" into its parts; false with *error (one line) when malformed.
bool ParseListenAddress(const std::string& text, std::string* host, int* port, std::string* error);
// Whether host is a loopback address (127.0.0.0/8, ::1, localhost).
bool IsLoopback(const std::string& host);
// Tries to bind host:port (as the servers will, SO_REUSEADDR, no SO_REUSEPORT) and releases it:
// a clear reason ("address already in use", "cannot assign requested address") before a server
// library would only say that it failed.
bool CheckCanListen(const std::string& host, int port, std::string* error);

struct ServerOptions {
  std::string listen = "127.0.0.1:18890";  // port 0 picks a free one (tests)
  std::string token;                       // "" = no authentication
  std::string tls_cert_pem, tls_key_pem;   // both set = TLS
  // The largest message a client may send (a stack upload plus framing); beyond it gRPC answers
  // RESOURCE_EXHAUSTED without reading it.
  size_t max_message_bytes = (16 << 20) + (64 << 10);
};

class CollectorServer {
 public:
  // Starts the gRPC server on options.listen over `core` (which must outlive it). nullptr with
  // *error (one line) when it cannot listen.
  static std::unique_ptr<CollectorServer> Start(CollectorCore* core, const ServerOptions& options, std::string* error);
  ~CollectorServer();  // Shutdown(0) if not done

  int port() const;
  // Stops accepting calls, cancels open command streams after `grace_s`, waits for handlers.
  void Shutdown(double grace_s);
  // The server's own counters: calls refused for the token, open command streams.
  void AppendMetrics(PrometheusText* out) const;
  uint64_t unauthenticated_calls() const;
  size_t command_streams_open() const;

  struct Impl;

 private:
  explicit CollectorServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// GET /            the page (CollectorCore::StatusPageHtml)
// GET /metrics     Prometheus text: the core's metrics plus `extra_metrics`
// GET /status.json CollectorCore::StatusJson
// GET /rounds/<round>/<file>   a merge output the core wrote (CollectorCore::RoundFile), else 404
class HttpFrontend {
 public:
  HttpFrontend(const CollectorCore* core, std::function<void(PrometheusText*)> extra_metrics = {});
  ~HttpFrontend();  // Stop()
  // Binds host:port ("127.0.0.1:18891"; port 0 picks one) and serves from its own threads.
  bool Start(const std::string& listen, std::string* error);
  int port() const;
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xtimer::collector
