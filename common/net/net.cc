#include "common/net/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

namespace xtimer::net {
namespace {

std::string Err(const std::string& what, int err) { return what + ": " + std::strerror(err); }

void Tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Waits for `events` on fd until the deadline. 1 ready, 0 deadline, -1 error (errno).
int Wait(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int ms = deadline.poll_ms();
    int r = poll(&p, 1, ms);
    if (r > 0) return 1;
    if (r == 0) {
      if (deadline.passed()) return 0;
      continue;
    }
    if (errno != EINTR) return -1;
  }
}

bool Resolve(const std::string& host, int port, bool passive, std::vector<addrinfo>* out,
             std::vector<sockaddr_storage>* addrs, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    *error = "cannot resolve '" + host + "': " + gai_strerror(rc);
    return false;
  }
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    sockaddr_storage ss{};
    std::memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
    addrinfo copy = *ai;
    copy.ai_next = nullptr;
    copy.ai_canonname = nullptr;
    out->push_back(copy);
    addrs->push_back(ss);
  }
  freeaddrinfo(res);
  for (size_t i = 0; i < out->size(); ++i) (*out)[i].ai_addr = reinterpret_cast<sockaddr*>(&(*addrs)[i]);
  if (out->empty()) {
    *error = "'" + host + "' has no address";
    return false;
  }
  return true;
}

}  // namespace

Deadline Deadline::In(double seconds) {
  if (!(seconds > 0)) seconds = 0;
  if (seconds > 1e7) seconds = 1e7;
  return Deadline(Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)));
}

double Deadline::left_s() const { return std::chrono::duration<double>(t_ - Clock::now()).count(); }

int Deadline::poll_ms() const {
  double left = left_s();
  if (left <= 0) return 0;
  double ms = std::ceil(left * 1000);
  return ms > 1e9 ? 1000000000 : static_cast<int>(ms);
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

void Fd::reset(int fd) {
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
}

std::string FormatAddr(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
      inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], host, sizeof host);
      return std::string(host) + ":" + std::to_string(ntohs(a->sin6_port));
    }
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "?";
}

std::string LocalHost(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  std::string s = FormatAddr(ss);
  size_t colon = s.rfind(':');
  if (colon == std::string::npos) return "";
  s.resize(colon);
  if (!s.empty() && s.front() == '[') s = s.substr(1, s.size() - 2);
  return s;
}

std::string PeerString(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "the peer";
  return FormatAddr(ss);
}

bool IsLocalAddress(const std::string& host) {
  std::vector<addrinfo> ais;
  std::vector<sockaddr_storage> addrs;
  std::string error;
  if (!Resolve(host, 1, false, &ais, &addrs, &error)) return false;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return false;
  bool local = false;
  for (const sockaddr_storage& ss : addrs) {
    if (ss.ss_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
      if ((ntohl(a->sin_addr.s_addr) >> 24) == 127) local = true;
    }
    for (ifaddrs* i = ifs; i != nullptr && !local; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != ss.ss_family) continue;
      if (ss.ss_family == AF_INET) {
        local = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr ==
                reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr.s_addr;
      } else if (ss.ss_family == AF_INET6) {
        local = std::memcmp(&reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr,
                            &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, sizeof(in6_addr)) == 0;
      }
    }
    if (local) break;
  }
  freeifaddrs(ifs);
  return local;
}

Fd Listen(const std::string& host, int* port, std::string* error) {
  std::vector<addrinfo> ais;
  std::vector<sockaddr_storage> addrs;
  if (!Resolve(host, *port, true, &ais, &addrs, error)) return Fd();
  // For "any address" prefer IPv6 (dual-stack), which also takes IPv4.
  std::string last;
  for (int pass = 0; pass < 2; ++pass) {
    for (const addrinfo& ai : ais) {
      if (host.empty() && (pass == 0) != (ai.ai_family == AF_INET6)) continue;
      if (!host.empty() && pass == 1) continue;
      Fd fd(socket(ai.ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (!fd.valid()) {
        last = Err("socket", errno);
        continue;
      }
      int one = 1, zero = 0;
      setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (ai.ai_family == AF_INET6) setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      if (bind(fd.get(), ai.ai_addr, ai.ai_addrlen) != 0) {
        last = Err("cannot bind " + FormatAddr(*reinterpret_cast<const sockaddr_storage*>(ai.ai_addr)), errno);
        continue;
      }
      if (listen(fd.get(), 1024) != 0) {
        last = Err("listen", errno);
        continue;
      }
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
      *port = ss.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port)
                                      : ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
      return fd;
    }
  }
  *error = last.empty() ? "no usable address to listen on" : last;
  return Fd();
}

Fd Connect(const std::string& host, int port, Deadline deadline, std::string* error) {
  std::string target = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  std::string last = "no attempt";
  double backoff = 0.02;
  while (true) {
    std::vector<addrinfo> ais;
    std::vector<sockaddr_storage> addrs;
    if (!Resolve(host, port, false, &ais, &addrs, &last)) {
      // Name resolution failures can be transient (DNS); retry like a refusal.
    }
    for (const addrinfo& ai : ais) {
      Fd fd(socket(ai.ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (!fd.valid()) {
        last = Err("socket", errno);
        continue;
      }
      Tune(fd.get());
      int rc = connect(fd.get(), ai.ai_addr, ai.ai_addrlen);
      if (rc != 0 && errno != EINPROGRESS) {
        last = Err("connect to " + target, errno);
        continue;
      }
      if (rc != 0) {
        int w = Wait(fd.get(), POLLOUT, deadline);
        if (w == 0) {
          last = "connect to " + target + ": no answer";
          break;
        }
        int soerr = 0;
        socklen_t len = sizeof soerr;
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &soerr, &len);
        if (w < 0 || soerr != 0) {
          last = Err("connect to " + target, w < 0 ? errno : soerr);
          continue;
        }
      }
      return fd;
    }
    if (deadline.passed()) break;
    double pause = std::min(backoff, std::max(0.0, deadline.left_s()));
    std::this_thread::sleep_for(std::chrono::duration<double>(pause));
    backoff = std::min(backoff * 2, 0.25);
    if (deadline.passed()) break;
  }
  *error = last + " (gave up after the deadline)";
  return Fd();
}

Fd Accept(int listen_fd, Deadline deadline, std::string* error) {
  for (;;) {
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      Tune(fd);
      return Fd(fd);
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
      *error = Err("accept", errno);
      return Fd();
    }
    int w = Wait(listen_fd, POLLIN, deadline);
    if (w == 0) {
      *error = "no connection arrived before the deadline";
      return Fd();
    }
    if (w < 0) {
      *error = Err("poll", errno);
      return Fd();
    }
  }
}

bool SendAll(int fd, const void* data, size_t n, Deadline deadline, std::string* error) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      *error = Err("send to " + PeerString(fd), errno);
      return false;
    }
    int r = Wait(fd, POLLOUT, deadline);
    if (r == 0) {
      *error = "send to " + PeerString(fd) + ": timed out";
      return false;
    }
    if (r < 0) {
      *error = Err("poll", errno);
      return false;
    }
  }
  return true;
}

bool RecvAll(int fd, void* data, size_t n, Deadline deadline, std::string* error) {
  char* p = static_cast<char*>(data);
  size_t want = n;
  while (n > 0) {
    ssize_t r = recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) {
      *error = want == n ? "connection closed by " + PeerString(fd)
                         : "connection closed by " + PeerString(fd) + " in the middle of a message";
      return false;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      *error = Err("recv from " + PeerString(fd), errno);
      return false;
    }
    int w = Wait(fd, POLLIN, deadline);
    if (w == 0) {
      *error = "recv from " + PeerString(fd) + ": timed out";
      return false;
    }
    if (w < 0) {
      *error = Err("poll", errno);
      return false;
    }
  }
  return true;
}

}  // namespace xtimer::net
