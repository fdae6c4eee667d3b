// The HTTP server of the agent's and the collector's /metrics (common/http_server.h) against
// requests a hostile or broken client sends, on raw connections. With httplib 0.11 alone:
//  - "GARBAGE\r\n\r\nGET /metrics ..." on one connection was answered 400, 400, then 200: the
//    server kept parsing after an error;
//  - 1,000 ranges of the 5 KB page made a 144 KB multipart answer;
//  - "Content-Length: -1" was answered 413 (read as 2^64-1), or ignored on a GET.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/http_server.h"

namespace xtimer {
namespace {

std::string Page() {
  std::string page;
  for (int i = 0; page.size() < 5000; ++i) page += "xtimer_test_metric{i=\"" + std::to_string(i) + "\"} 1\n";
  return page;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpLimits limits;
    limits.workers = 2;
    limits.idle_timeout_s = 1;  // without the fix a kept-alive connection ends only here
    server_ = std::make_unique<GuardedHttpServer>(limits);
    server_->Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(Page(), "text/plain; version=0.0.4");
    });
    ASSERT_TRUE(server_->Start("127.0.0.1", 0));
  }
  void TearDown() override { server_->Shutdown(); }

  // Sends `request` on a new connection and returns everything the server wrote until it closed
  // the connection (a guard of 60 s against a hang; never reached when the test passes).
  std::string Exchange(const std::string& request) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_GE(s, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(server_->port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(send(s, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
    std::string got;
    char buf[65536];
    for (;;) {
      pollfd p{s, POLLIN, 0};
      if (poll(&p, 1, 60000) <= 0) {
        ADD_FAILURE() << "the server neither answered nor closed the connection";
        break;
      }
      ssize_t n = recv(s, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    close(s);
    return got;
  }

  std::unique_ptr<GuardedHttpServer> server_;
};

struct Response {
  int status = 0;
  std::string head, body;
};

// The responses in what a connection received, one after another (Content-Length framing).
std::vector<Response> Responses(const std::string& raw) {
  std::vector<Response> out;
  size_t at = 0;
  while (at < raw.size()) {
    size_t end = raw.find("\r\n\r\n", at);
    if (end == std::string::npos || raw.compare(at, 9, "HTTP/1.1 ") != 0) break;
    Response r;
    r.head = raw.substr(at, end + 4 - at);
    r.status = std::atoi(raw.c_str() + at + 9);
    size_t len = 0, cl = r.head.find("Content-Length: ");
    if (cl != std::string::npos) len = std::strtoull(r.head.c_str() + cl + 16, nullptr, 10);
    r.body = raw.substr(end + 4, len);
    at = end + 4 + len;
    out.push_back(r);
  }
  return out;
}

std::string Statuses(const std::vector<Response>& rs) {
  std::string s;
  for (const Response& r : rs) s += std::to_string(r.status) + " ";
  return s;
}

TEST_F(HttpServerTest, GoodRequestsOnOneConnectionAreAllAnswered) {
  const std::string get = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  std::vector<Response> rs =
      Responses(Exchange(get + get + "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  ASSERT_EQ(rs.size(), 3u) << Statuses(rs);
  for (const Response& r : rs) {
    EXPECT_EQ(r.status, 200);
    EXPECT_TRUE(r.body == Page()) << "not the page: " << r.body.size() << " bytes";
  }
}

TEST_F(HttpServerTest, TheConnectionIsClosedAfterAnErrorResponse) {
  std::string raw = Exchange("GARBAGE\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  std::vector<Response> rs = Responses(raw);
  ASSERT_EQ(rs.size(), 1u) << "answered " << Statuses(rs) << "(the server went on parsing after the 400)";
  EXPECT_EQ(rs[0].status, 400);
  EXPECT_NE(rs[0].head.find("\r\nConnection: close\r\n"), std::string::npos) << rs[0].head;
  EXPECT_EQ(rs[0].head.find("Keep-Alive"), std::string::npos) << rs[0].head;
}

TEST_F(HttpServerTest, RangesAreIgnoredTheWholePageIsServed) {
  std::string ranges = "bytes=";
  for (int i = 0; i < 1000; ++i) ranges += (i ? "," : "") + std::to_string(i) + "-" + std::to_string(i);
  std::string raw = Exchange("GET /metrics HTTP/1.1\r\nHost: x\r\nRange: " + ranges + "\r\nConnection: close\r\n\r\n");
  std::vector<Response> rs = Responses(raw);
  ASSERT_EQ(rs.size(), 1u) << raw.substr(0, 300);
  EXPECT_EQ(rs[0].status, 200) << rs[0].head.substr(0, 200);
  EXPECT_TRUE(rs[0].body == Page()) << "not the page: " << rs[0].body.size() << " bytes";
  EXPECT_LE(raw.size(), Page().size() + 1024)
      << "a " << raw.size() << "-byte answer for a " << Page().size() << "-byte page";
  // One range too: Prometheus and browsers fetch these pages whole.
  rs = Responses(Exchange("GET /metrics HTTP/1.1\r\nHost: x\r\nRange: bytes=0-9\r\nConnection: close\r\n\r\n"));
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].status, 200);
  EXPECT_TRUE(rs[0].body == Page()) << "not the page: " << rs[0].body.size() << " bytes";
}

TEST_F(HttpServerTest, AContentLengthThatIsNotANumberIsABadRequest) {
  for (std::string method : {"POST", "GET"}) {
    for (std::string length : {"-1", "+5", "5, 5", "0x10", "99999999999999999999999"}) {
      SCOPED_TRACE(method + " with Content-Length: " + length);
      std::vector<Response> rs =
          Responses(Exchange(method + " /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + "\r\n\r\n"));
      ASSERT_EQ(rs.size(), 1u) << Statuses(rs);
      EXPECT_EQ(rs[0].status, 400);
    }
  }
  // Two different lengths.
  std::vector<Response> rs =
      Responses(Exchange("POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"));
  ASSERT_EQ(rs.size(), 1u) << Statuses(rs);
  EXPECT_EQ(rs[0].status, 400);
}

}  // namespace
}  // namespace xtimer
