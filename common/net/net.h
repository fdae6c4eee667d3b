// Sockets with deadlines. Every socket is non-blocking; every call that can wait takes a
// Deadline and fails with a one-line error when it passes. No call here can hang.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <string>

namespace xtimer::net {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;
  static Deadline In(double seconds);
  static Deadline At(Clock::time_point t) { return Deadline(t); }
  double left_s() const;  // <= 0 once passed
  bool passed() const { return left_s() <= 0; }
  int poll_ms() const;  // for poll(2): at least 0, rounded up
  Clock::time_point when() const { return t_; }
  static Deadline Earlier(Deadline a, Deadline b) { return a.t_ < b.t_ ? a : b; }

 private:
  explicit Deadline(Clock::time_point t) : t_(t) {}
  Clock::time_point t_;
};

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// "1.2.3.4:5" or "[::1]:5".
std::string FormatAddr(const sockaddr_storage& ss);
// The numeric host of the local end of a connected socket ("" on error).
std::string LocalHost(int fd);
std::string PeerString(int fd);

// True when `host` resolves to an address of one of this machine's interfaces.
bool IsLocalAddress(const std::string& host);

// Listens on host:port (host "" = every address; port 0 = any). *port gets the bound port.
Fd Listen(const std::string& host, int* port, std::string* error);
// Connects, retrying refused/unreachable attempts until the deadline.
Fd Connect(const std::string& host, int port, Deadline deadline, std::string* error);
// Waits for one connection.
Fd Accept(int listen_fd, Deadline deadline, std::string* error);

bool SendAll(int fd, const void* data, size_t n, Deadline deadline, std::string* error);
bool RecvAll(int fd, void* data, size_t n, Deadline deadline, std::string* error);

}  // namespace xtimer::net
