#include "preload/link/agent_hello.h"

#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/env.h"
#include "common/identity.h"
#include "common/json_writer.h"
#include "common/log.h"
#include "preload/base/inflight_op.h"
#include "preload/capture/dumper.h"

namespace xtimer {
namespace {

std::atomic<int> g_fd{-1};  // the socket opened at load, until the link thread takes it
// What it is connected to, written at load only. A plain array: a constructor may run before
// this file's static initialisers.
char g_path[sizeof(sockaddr_un::sun_path)];

// The same fields the link thread sends (agent_link.cc), from the environment only: before
// CUDA there is no communicator to take a rank from.
void WriteRankFields(JsonWriter& w) {
  const RankInfo r = RankFromEnv();
  w.Field("rank", r.rank).Field("world_size", r.world_size).Field("local_rank", r.local_rank);
  w.Field("host", HostName()).Field("pid", static_cast<int>(getpid()));
}

void Send(int fd, const std::string& msg) {
  // Non-blocking: a slow agent costs us the message, never time.
  if (send(fd, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(msg.size()))
    Log(LogLevel::kDebug, "a message to the node agent was not sent: %s", std::strerror(errno));
}

// On the dumper thread, after a dump the signal asked for: tell the agent where the file is.
void ReportDump(const capture::DumpStats& stats) {
  const int fd = g_fd.load(std::memory_order_acquire);
  if (fd < 0) return;
  JsonWriter w;
  w.BeginObject().Field("type", "dump_written").Field("path", stats.path).Field("request_id", "");
  WriteRankFields(w);
  Send(fd, w.EndObject().Take());
}

void CloseInChild() {
  // The child is not the rank: its copy of the socket must not speak for it.
  const int fd = g_fd.exchange(-1);
  if (fd >= 0) close(fd);
  capture::Dumper::Instance().SetDumpObserver(nullptr);
}

}  // namespace

bool ConnectAtLoad() {
  std::string path = env::String("XTIMER_AGENT_SOCKET");
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof addr.sun_path) return false;  // the link thread says why, if it starts
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return false;
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    Log(LogLevel::kDebug, "no node agent at %s yet (%s); it learns of this rank at its first CUDA call", path.c_str(),
        std::strerror(errno));
    close(fd);
    return false;
  }
  std::memcpy(g_path, path.c_str(), path.size() + 1);
  g_fd.store(fd, std::memory_order_release);
  pthread_atfork(nullptr, nullptr, CloseInChild);
  return true;
}

void SendHelloAtLoad(int dump_signal) {
  const int fd = g_fd.load(std::memory_order_acquire);
  if (fd < 0) return;
  JsonWriter w;
  w.BeginObject().Field("type", "hello");
  WriteRankFields(w);
  w.Field("link", false).Field("dump_signal", dump_signal);
  Send(fd, w.EndObject().Take());
  capture::Dumper::Instance().SetDumpObserver(ReportDump);
}

int TakeSocketFromLoad(const std::string& path) {
  capture::Dumper::Instance().SetDumpObserver(nullptr);
  const int fd = g_fd.exchange(-1, std::memory_order_acq_rel);
  if (fd < 0) return -1;
  // The program may have closed our descriptor and reused the number: adopt it only if it is
  // still a socket connected to the agent.
  sockaddr_un peer{};
  socklen_t len = sizeof peer;
  if (path != g_path || getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0 || peer.sun_family != AF_UNIX ||
      std::strncmp(peer.sun_path, path.c_str(), sizeof peer.sun_path) != 0)
    return -1;  // not ours any more: leave it alone
  return fd;
}

}  // namespace xtimer
