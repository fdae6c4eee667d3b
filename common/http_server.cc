#include "common/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <vector>

#include "common/http_port.h"
#include "common/mutex.h"

namespace xtimer {
namespace {

using Clock = std::chrono::steady_clock;

// When the connection a worker is about to serve was accepted (set by the pool before it runs
// httplib's job, which carries only the socket).
thread_local Clock::time_point t_accepted{};

Clock::time_point After(Clock::time_point from, double s) {
  return from + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Waits until fd is ready for `events`. False when the deadline passes first or wake_fd is
// readable (the server is shutting down).
bool WaitReady(int fd, short events, int wake_fd, Clock::time_point deadline) {
  for (;;) {
    // Past the deadline one look without waiting remains: what has arrived is still served (a
    // whole request that waited in the queue), a client that is still sending is not waited for.
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};
    int n = poll(p, wake_fd >= 0 ? 2 : 1, static_cast<int>(std::clamp<long long>(left, 0, INT_MAX)));
    if (n < 0 && errno != EINTR) return false;
    if (n <= 0) {
      if (left <= 0) return false;
      continue;
    }
    if (wake_fd >= 0 && p[1].revents != 0) return false;
    if (p[0].revents != 0) return true;  // also on POLLHUP/POLLERR: the read or write says which
  }
}

void AddressOf(int sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  int rc = peer ? getpeername(sock, reinterpret_cast<sockaddr*>(&addr), &len)
                : getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len);
  ip.clear();
  port = 0;
  if (rc != 0) return;
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
    port = ntohs(a->sin6_port);
  }
  ip = buf;
}

// A connection as httplib reads and writes it, with our deadlines. Reads are buffered (httplib
// reads a request line by line, a byte at a time).
class DeadlineStream : public httplib::Stream {
 public:
  DeadlineStream(int sock, int wake_fd, const HttpLimits& limits, Clock::time_point connection_end)
      : sock_(sock), wake_(wake_fd), limits_(limits), connection_end_(connection_end) {}

  // The next request must have arrived whole by `deadline`.
  void BeginRequest(Clock::time_point deadline) {
    read_deadline_ = std::min(deadline, connection_end_);
    request_bytes_ = 0;
    status_ = 0;
  }
  // The status code of the response written since BeginRequest; 0 none.
  int status() const { return status_; }
  // Keep-alive: waits for the first byte of another request. False when none comes in time.
  bool WaitNextRequest(double idle_s) {
    return pos_ < len_ || WaitReady(sock_, POLLIN, wake_, std::min(After(Clock::now(), idle_s), connection_end_));
  }

  bool is_readable() const override { return pos_ < len_ || WaitReady(sock_, POLLIN, wake_, read_deadline_); }
  bool is_writable() const override { return WaitReady(sock_, POLLOUT, wake_, WriteDeadline()); }

  ssize_t read(char* ptr, size_t size) override {
    if (pos_ == len_) {
      if (request_bytes_ >= limits_.max_request_bytes) return -1;
      if (!WaitReady(sock_, POLLIN, wake_, read_deadline_)) return -1;
      ssize_t n;
      do n = recv(sock_, buf_, sizeof buf_, 0);
      while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      pos_ = 0;
      len_ = static_cast<size_t>(n);
      request_bytes_ += len_;
    }
    size_t k = std::min(size, len_ - pos_);
    std::memcpy(ptr, buf_ + pos_, k);
    pos_ += k;
    return static_cast<ssize_t>(k);
  }

  // All of it or -1 (httplib writes the status line and headers with one write and does not
  // look at the count). The first write of a response starts with its status line: its code is
  // kept, and an error response (>= 400) says "Connection: close" instead of httplib's
  // "Keep-Alive: ..." line, since the connection is closed after it.
  ssize_t write(const char* ptr, size_t size) override {
    std::string edited;
    if (status_ == 0 && size >= 12 && std::memcmp(ptr, "HTTP/1.", 7) == 0 && ptr[8] == ' ') {
      status_ = std::atoi(std::string(ptr + 9, 3).c_str());
      if (status_ < 200) status_ = 0;  // "100 Continue": the response follows
      if (status_ >= 400) {
        edited.assign(ptr, size);
        size_t at = edited.find("\r\nKeep-Alive: ");
        size_t end = at == std::string::npos ? at : edited.find("\r\n", at + 2);
        if (end != std::string::npos) edited.replace(at + 2, end - at - 2, "Connection: close");
      }
    }
    const char* p = edited.empty() ? ptr : edited.data();
    size_t left = edited.empty() ? size : edited.size();
    while (left > 0) {
      if (!WaitReady(sock_, POLLOUT, wake_, WriteDeadline())) return -1;
      ssize_t n = send(sock_, p, left, MSG_NOSIGNAL);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return -1;
      p += n;
      left -= static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { AddressOf(sock_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { AddressOf(sock_, false, ip, port); }
  socket_t socket() const override { return sock_; }

 private:
  Clock::time_point WriteDeadline() const {
    return std::min(After(Clock::now(), limits_.write_timeout_s), connection_end_);
  }

  int sock_, wake_;
  const HttpLimits& limits_;
  Clock::time_point connection_end_, read_deadline_;
  size_t request_bytes_ = 0;
  int status_ = 0;
  char buf_[4096];
  size_t pos_ = 0, len_ = 0;
};

// Called by httplib for every request it parsed, before routing.
//  - Range is ignored (the whole page, 200): ours are small pages that Prometheus and browsers
//    fetch whole, and httplib 0.11 answers any number of ranges (1,000 ranges of a 5 KB page
//    made a 144 KB multipart answer).
//  - A Content-Length that is not one decimal number (httplib 0.11 reads "-1" as 2^64-1 and
//    answers 413, or ignores it on a GET) is a bad request: the method is replaced by one no
//    route serves, for which httplib answers 400 without reading a body.
void CheckRequest(httplib::Request& req) {
  req.ranges.clear();
  req.headers.erase("Range");
  size_t n = req.get_header_value_count("Content-Length");
  std::string first = n > 0 ? req.get_header_value("Content-Length") : "";
  for (size_t i = 0; i < n; ++i) {
    std::string v = req.get_header_value("Content-Length", i);
    if (v.empty() || v.size() > 18 || v != first ||
        !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      req.method = "INVALID-CONTENT-LENGTH";
      return;
    }
  }
}

}  // namespace

// The workers: httplib's ThreadPool, plus when each connection was accepted and how many wait.
struct GuardedHttpServer::Pool : httplib::TaskQueue {
  explicit Pool(size_t n) {
    for (size_t i = 0; i < std::max<size_t>(n, 1); ++i) threads_.emplace_back([this] { Work(); });
  }
  void enqueue(std::function<void()> fn) override {
    MutexLock lock(mu_);
    jobs_.push_back({std::move(fn), Clock::now()});
    waiting_.fetch_add(1, std::memory_order_relaxed);
    cv_.NotifyOne();
  }
  void shutdown() override {
    {
      MutexLock lock(mu_);
      done_ = true;
    }
    cv_.NotifyAll();
    for (std::thread& t : threads_) t.join();
  }
  size_t waiting() const { return waiting_.load(std::memory_order_relaxed); }

 private:
  struct Job {
    std::function<void()> fn;
    Clock::time_point accepted;
  };
  void Work() {
    for (;;) {
      Job job;
      {
        MutexLock lock(mu_);
        cv_.Wait(mu_, [this]() XT_REQUIRES(mu_) { return done_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // done, and every queued connection was served (or closed)
        job = std::move(jobs_.front());
        jobs_.pop_front();
        waiting_.fetch_sub(1, std::memory_order_relaxed);
      }
      t_accepted = job.accepted;
      job.fn();
      t_accepted = {};
    }
  }

  std::vector<std::thread> threads_;
  Mutex mu_;
  CondVar cv_;
  std::deque<Job> jobs_ XT_GUARDED_BY(mu_);
  std::atomic<size_t> waiting_{0};
  bool done_ XT_GUARDED_BY(mu_) = false;
};

GuardedHttpServer::GuardedHttpServer(HttpLimits limits) : limits_(limits) {
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) wake_[0] = wake_[1] = -1;  // then only deadlines end waits
  UseExclusivePort(*this);
  new_task_queue = [this] {
    Pool* pool = new Pool(limits_.workers);
    pool_ = pool;
    return pool;
  };
  set_payload_max_length(limits_.max_request_bytes);
  set_keep_alive_max_count(limits_.keep_alive_max);
}

GuardedHttpServer::~GuardedHttpServer() {
  Shutdown();
  for (int fd : wake_)
    if (fd >= 0) close(fd);
}

bool GuardedHttpServer::Start(const std::string& host, int port) {
  if (port == 0) {
    port_ = bind_to_any_port(host);
    if (port_ <= 0) return false;
  } else {
    if (!bind_to_port(host, port)) return false;
    port_ = port;
  }
  listener_ = std::thread([this] { listen_after_bind(); });
  return true;
}

void GuardedHttpServer::Shutdown() {
  if (stopping_.exchange(true)) return;
  if (wake_[1] >= 0) {
    char c = 1;
    ssize_t ignored = write(wake_[1], &c, 1);  // stays readable: every wait from now on ends at once
    (void)ignored;
  }
  // httplib's stop() does nothing until its listener has marked itself running; this does not
  // depend on that. The socket is closed after the listener is gone, so its number cannot be
  // reused under an accept() still running.
  socket_t s = svr_sock_.exchange(INVALID_SOCKET);
  if (s != INVALID_SOCKET) ::shutdown(s, SHUT_RDWR);
  if (listener_.joinable()) listener_.join();  // its pool's workers are joined inside
  if (s != INVALID_SOCKET) close(s);
}

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  const Clock::time_point now = Clock::now();
  const Clock::time_point accepted = t_accepted == Clock::time_point{} ? now : t_accepted;
  DeadlineStream stream(sock, wake_[0], limits_, After(accepted, limits_.connection_max_s));
  bool ok = false;
  for (size_t n = 0; n < limits_.keep_alive_max && !stopping_; ++n) {
    if (n == 0) {
      stream.BeginRequest(After(accepted, limits_.request_timeout_s));  // queued time counts
    } else {
      Pool* pool = pool_.load();
      if (pool != nullptr && pool->waiting() > 0) break;  // a worker is wanted: no keep-alive
      if (!stream.WaitNextRequest(limits_.idle_timeout_s)) break;
      stream.BeginRequest(After(Clock::now(), limits_.request_timeout_s));
    }
    bool closed = false;
    ok = process_request(stream, n + 1 == limits_.keep_alive_max, closed, CheckRequest);
    // After an error response the rest of what the client sent is not read as more requests
    // (a request that failed to parse left the stream at an unknown place).
    if (!ok || closed || stream.status() >= 400) break;
  }
  ::shutdown(sock, SHUT_RDWR);
  close(sock);
  return ok;
}

}  // namespace xtimer
