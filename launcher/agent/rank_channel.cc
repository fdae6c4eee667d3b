#include "launcher/agent/rank_channel.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "common/log.h"
#include "common/steps/step_json.h"

namespace xtimer {

namespace {

// A field the agent reads as an integer holds a float (or an integer beyond 64 bits, which the
// JSON parser keeps as a float): converting it is undefined behaviour, so the message is refused
// here. Fields of other wrong types (a string) throw in the handler, which drops the message.
bool FloatWhereIntegerBelongs(const nlohmann::json& obj, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    auto it = obj.find(key);
    if (it != obj.end() && it->is_number_float()) return true;
  }
  return false;
}

}  // namespace

bool ParseRankMessage(std::string_view bytes, nlohmann::json* msg, std::string* why) {
  *msg = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
  if (msg->is_discarded() || !msg->is_object() || !msg->contains("type") || !(*msg)["type"].is_string())
    return *why = "a message that is not a JSON object with a type", false;
  // Found by tests/launcher/rank_message_fuzz.cc: {"pid": 1e300} reached an int conversion.
  if (FloatWhereIntegerBelongs(*msg, {"pid", "rank", "world_size", "local_rank", "dumps"}))
    return *why = "a message with a fraction or a huge number where an integer belongs", false;
  auto summary = msg->find("summary");
  if (summary != msg->end() && summary->is_object()) {
    auto ops = summary->find("ops");
    if (ops != summary->end() && ops->is_array())
      for (const auto& op : *ops)
        if (op.is_object() && FloatWhereIntegerBelongs(op, {"count", "bytes", "m", "n", "k"}))
          return *why = "a summary with a fraction or a huge number where an integer belongs", false;
  }
  return true;
}

size_t StepRecordsOf(const nlohmann::json& msg, std::vector<slowdown::StepRecord>* out, std::string* why) {
  auto records = msg.find("records");
  if (records == msg.end() || !records->is_array()) return *why = "no \"records\" array", 1;
  int64_t rank = -1;  // the message's (ParseRankMessage refused a fraction there)
  if (auto r = msg.find("rank"); r != msg.end() && r->is_number_integer()) rank = r->get<int64_t>();
  size_t bad = 0;
  std::string reason;
  for (const nlohmann::json& j : *records) {
    slowdown::StepRecord rec;
    if (!slowdown::StepRecordFromJson(j, &rec, &reason)) {
      if (bad++ == 0) *why = reason;
      continue;
    }
    if (rank >= 0 && rec.rank != rank) {
      if (bad++ == 0)
        *why = "a record of rank " + std::to_string(rec.rank) + " in rank " + std::to_string(rank) + "'s message";
      continue;
    }
    out->push_back(std::move(rec));
  }
  return bad;
}

RankChannel::~RankChannel() { Stop(); }

bool RankChannel::Listen(const std::string& path, std::string* error) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) {
    *error = "socket path too long: " + path;
    return false;
  }
  listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) {
    *error = std::string("cannot create the agent socket: ") + std::strerror(errno);
    return false;
  }
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(listen_fd_, 256) != 0) {
    *error = "cannot listen on " + path + ": " + std::strerror(errno);
    close(listen_fd_);
    listen_fd_ = -1;
    return false;
  }
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  return true;
}

void RankChannel::Start(OnMessage on_message, OnClose on_close) {
  on_message_ = std::move(on_message);
  on_close_ = std::move(on_close);
  thread_ = std::thread([this] { Loop(); });
}

bool RankChannel::Send(int conn, const std::string& msg) {
  MutexLock lock(mu_);
  auto it = conns_.find(conn);
  if (it == conns_.end()) return false;
  return send(it->second, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(msg.size());
}

void RankChannel::Stop() {
  if (stop_fd_ >= 0) {
    uint64_t one = 1;
    if (write(stop_fd_, &one, sizeof one) < 0) {
      // already signalled
    }
  }
  if (thread_.joinable()) thread_.join();
  MutexLock lock(mu_);
  for (auto& [id, fd] : conns_) close(fd);
  conns_.clear();
  if (listen_fd_ >= 0) close(listen_fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
  listen_fd_ = stop_fd_ = -1;
}

void RankChannel::Loop() {
  std::vector<char> buf(kMaxMessage + 1);
  int next_id = 1;
  for (;;) {
    std::vector<pollfd> fds = {{stop_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    std::vector<int> ids = {0, 0};
    {
      MutexLock lock(mu_);
      for (auto& [id, fd] : conns_) {
        fds.push_back({fd, POLLIN, 0});
        ids.push_back(id);
      }
    }
    if (poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) return;
    if (fds[0].revents & POLLIN) return;
    if (fds[1].revents & POLLIN) {
      for (;;) {
        int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        MutexLock lock(mu_);
        conns_[next_id++] = fd;
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      int id = ids[i];
      bool closed = (fds[i].revents & (POLLHUP | POLLERR)) != 0 && !(fds[i].revents & POLLIN);
      while (!closed) {
        ssize_t n = recv(fds[i].fd, buf.data(), buf.size(), MSG_DONTWAIT | MSG_TRUNC);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n <= 0) {
          closed = true;
          break;
        }
        if (static_cast<size_t>(n) > kMaxMessage) {
          Log(LogLevel::kWarn, "agent: a rank sent a message of %zd bytes (limit %zu); dropped", n, kMaxMessage);
          continue;
        }
        nlohmann::json msg;
        std::string why;
        if (!ParseRankMessage(std::string_view(buf.data(), static_cast<size_t>(n)), &msg, &why)) {
          Log(LogLevel::kWarn, "agent: a rank sent %s; dropped", why.c_str());
          continue;
        }
        try {
          on_message_(id, msg);
        } catch (const std::exception& e) {  // a field of the wrong type
          Log(LogLevel::kWarn, "agent: a rank's %s message was malformed (%s); dropped",
              msg["type"].get<std::string>().c_str(), e.what());
        }
      }
      if (closed) {
        {
          MutexLock lock(mu_);
          close(conns_[id]);
          conns_.erase(id);
        }
        on_close_(id);
      }
    }
  }
}

}  // namespace xtimer
