// The collector's HTTP side (cpp-httplib): /metrics, the page, status.json and the files of
// finished dump rounds. Read-only; nothing a request names becomes a path: a round's file is
// served only when the core says it wrote it (CollectorCore::RoundFile).
#include <httplib.h>

#include <thread>

#include "collector/collector_server.h"
#include "common/http_server.h"
#include "common/log.h"
#include "common/regular_file.h"

namespace xtimer::collector {

struct HttpFrontend::Impl {
  const CollectorCore* core;
  std::function<void(PrometheusText*)> extra;
  GuardedHttpServer server;  // deadlines, enough workers, a shutdown that waits on no client
};

namespace {

constexpr size_t kMaxServedFile = size_t{256} << 20;

const char* ContentType(const std::string& file) {
  auto ends = [&](const char* s) {
    size_t n = strlen(s);
    return file.size() >= n && file.compare(file.size() - n, n, s) == 0;
  };
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".json")) return "application/json";
  return "text/plain; charset=utf-8";  // .folded, .dot
}

void Secure(httplib::Response& res, const char* csp) {
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Content-Security-Policy", csp);
  res.set_header("Cache-Control", "no-store");
  res.set_header("Referrer-Policy", "no-referrer");
}

}  // namespace

HttpFrontend::HttpFrontend(const CollectorCore* core, std::function<void(PrometheusText*)> extra_metrics)
    : impl_(std::make_unique<Impl>()) {
  impl_->core = core;
  impl_->extra = std::move(extra_metrics);
}

HttpFrontend::~HttpFrontend() { Stop(); }

bool HttpFrontend::Start(const std::string& listen, std::string* error) {
  std::string host;
  int port = 0;
  if (!ParseListenAddress(listen, &host, &port, error)) return false;
  if (!CheckCanListen(host, port, error)) return false;
  Impl* d = impl_.get();
  GuardedHttpServer& s = d->server;
  s.Get("/", [d](const httplib::Request&, httplib::Response& res) {
    Secure(res, "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'");
    res.set_content(d->core->StatusPageHtml("rounds/"), "text/html; charset=utf-8");
  });
  s.Get("/metrics", [d](const httplib::Request&, httplib::Response& res) {
    PrometheusText text;
    d->core->AppendMetrics(&text);
    if (d->extra) d->extra(&text);
    Secure(res, "default-src 'none'");
    res.set_content(text.Text(), PrometheusText::kContentType);
  });
  s.Get("/status.json", [d](const httplib::Request&, httplib::Response& res) {
    Secure(res, "default-src 'none'");
    res.set_content(d->core->StatusJson(), "application/json");
  });
  s.Get(R"(/rounds/([0-9A-Za-z_-]{1,80})/([0-9A-Za-z_.-]{1,80}))", [d](const httplib::Request& req,
                                                                       httplib::Response& res) {
    std::optional<std::string> path = d->core->RoundFile(req.matches[1].str(), req.matches[2].str());
    if (!path) {
      res.status = 404;
      res.set_content("no such file of a finished dump round\n", "text/plain");
      return;
    }
    // Files the collector wrote itself: a link or a FIFO planted in the folder is not served.
    std::string body, why;
    if (!ReadRegularFile(*path, FileRule{.what = "round file", .max_bytes = kMaxServedFile, .follow_links = false},
                         &body, &why)) {
      Log(LogLevel::kWarn, "collector: round file %s %s; not served", path->c_str(), why.c_str());
      res.status = 500;
      res.set_content("cannot read the file\n", "text/plain");
      return;
    }
    // The flame graphs carry their own script (zoom, search); nothing else may load.
    Secure(res, "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'");
    res.set_content(body, ContentType(req.matches[2].str()));
  });
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) res.set_content(std::to_string(res.status) + "\n", "text/plain");
  });

  if (!s.Start(host, port)) return *error = "cannot listen on " + listen, false;
  return true;
}

int HttpFrontend::port() const { return impl_->server.port(); }

void HttpFrontend::Stop() {
  if (impl_) impl_->server.Shutdown();
}

}  // namespace xtimer::collector
