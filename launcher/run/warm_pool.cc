#include "launcher/run/warm_pool.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/env.h"
#include "common/log.h"

namespace xtimer::run {
namespace {

constexpr int kWarmFd = 3;  // the hand-over socket's number in the warm interpreter

std::string KeyOf(const std::string& kv) { return kv.substr(0, kv.find('=')); }

// The environment a warm interpreter starts with, and is compared by: the worker's, less the
// round's identity, sorted.
std::vector<std::string> BaseEnvironment(const std::vector<std::string>& env) {
  std::vector<std::string> out;
  for (const std::string& kv : env)
    if (!RoundVariable(KeyOf(kv))) out.push_back(kv);
  std::sort(out.begin(), out.end());
  return out;
}

// The first variable whose value differs between two sorted environments ("" when equal).
std::string FirstDifference(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (i < a.size() && j < b.size() && a[i] == b[j]) {
      ++i, ++j;
      continue;
    }
    if (j >= b.size() || (i < a.size() && a[i] < b[j])) return KeyOf(a[i]);
    return KeyOf(b[j]);
  }
  return "";
}

bool SendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

bool RoundVariable(const std::string& key) {
  static const char* const kRound[] = {
      "RANK",           "LOCAL_RANK",      "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",  "GROUP_WORLD_SIZE",
      "ROLE_RANK",      "ROLE_WORLD_SIZE", "ROLE_NAME",  "MASTER_ADDR",      "MASTER_PORT", "XTIMER_AGENT_SOCKET",
      "XTIMER_WARM_FD", "XTIMER_RANK_PID",
  };
  for (const char* k : kRound)
    if (key == k) return true;
  return key.rfind("TORCHELASTIC_", 0) == 0;
}

std::vector<std::string> WarmPool::ImportsFromSettings() {
  std::vector<std::string> out = {"torch", "torch._dynamo"};
  std::string more = env::String("XTIMER_WARM_IMPORTS");
  for (size_t start = 0; start <= more.size();) {
    size_t end = more.find(',', start);
    if (end == std::string::npos) end = more.size();
    std::string name = more.substr(start, end - start);
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    if (!name.empty() && std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
    start = end + 1;
  }
  return out;
}

WarmPool::WarmPool(std::string python, std::string script, std::vector<std::string> imports)
    : python_(std::move(python)), script_(std::move(script)), imports_(std::move(imports)) {}

WarmPool::~WarmPool() { Clear(); }

void WarmPool::Clear() {
  for (Slot& s : slots_) Discard(&s);
}

void WarmPool::Discard(Slot* slot) {
  if (slot->pid > 0) kill(slot->pid, SIGKILL);
  if (slot->sock >= 0) close(slot->sock);
  *slot = Slot{};
}

bool WarmPool::Alive(Slot* slot) {
  if (slot->pid <= 0 || slot->sock < 0) return false;
  pollfd p{slot->sock, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0) return true;  // nothing to say yet: importing
  char c = 0;
  ssize_t n = recv(slot->sock, &c, 1, MSG_DONTWAIT);
  if (n == 1 && c == 'R') slot->ready = true;
  return n == 1 || (n < 0 && (errno == EAGAIN || errno == EINTR));
}

bool WarmPool::Start(int local_rank, const std::vector<std::string>& env, Slot* slot) {
  std::string exe = ResolveProgram(python_);
  if (exe.empty() || access(script_.c_str(), R_OK) != 0) {
    if (!failed_)
      Log(LogLevel::kWarn, "run: no warm interpreters (%s not found): workers start fresh",
          exe.empty() ? python_.c_str() : script_.c_str());
    failed_ = true;
    return false;
  }
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return false;
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  std::vector<std::string> argv_s = {python_, "-u", script_};
  argv_s.insert(argv_s.end(), imports_.begin(), imports_.end());
  std::vector<std::string> env_s = env;
  env_s.push_back("XTIMER_WARM_FD=" + std::to_string(kWarmFd));
  std::vector<char*> argv, envp;
  for (const std::string& a : argv_s) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : env_s) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  sigset_t none;
  sigemptyset(&none);
  pid_t agent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(pair[0]), close(pair[1]);
    if (null_fd >= 0) close(null_fd);
    return false;
  }
  if (pid == 0) {
    // Async-signal-safe calls only. No session of its own yet: the hand-over makes one
    // (os.setsid), as a fresh worker has; until then it shares xtimer_run's, and so its share of
    // the CPUs, and leaves the training workers theirs.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != agent) _exit(127);
    for (int s = 1; s < NSIG; ++s) signal(s, SIG_DFL);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (null_fd >= 0) dup2(null_fd, STDOUT_FILENO), dup2(null_fd, STDERR_FILENO);
    if (pair[1] == kWarmFd) fcntl(kWarmFd, F_SETFD, 0);
    else dup2(pair[1], kWarmFd);
    execve(exe.c_str(), argv.data(), envp.data());
    _exit(126);
  }
  close(pair[1]);
  if (null_fd >= 0) close(null_fd);
  slot->pid = pid;
  slot->sock = pair[0];
  slot->ready = false;
  slot->env = env;
  Log(LogLevel::kDebug, "run: warm interpreter %d for local rank %d started", static_cast<int>(pid), local_rank);
  return true;
}

void WarmPool::Fill(const std::vector<WorkerSpec>& specs) {
  if (failed_) return;
  for (const WorkerSpec& spec : specs) {
    if (spec.local_rank < 0) continue;
    if (slots_.size() <= static_cast<size_t>(spec.local_rank)) slots_.resize(spec.local_rank + 1);
    Slot& slot = slots_[spec.local_rank];
    std::vector<std::string> env = BaseEnvironment(spec.env);
    if (Alive(&slot) && slot.env == env) continue;
    Discard(&slot);
    if (!Start(spec.local_rank, env, &slot)) return;
  }
}

pid_t WarmPool::HandOver(const WorkerSpec& spec, int stdout_fd, int stderr_fd, std::string* why) {
  if (spec.local_rank < 0 || slots_.size() <= static_cast<size_t>(spec.local_rank))
    return (*why = "no warm interpreter"), -1;
  Slot& slot = slots_[spec.local_rank];
  if (slot.pid <= 0) return (*why = "no warm interpreter"), -1;
  if (!Alive(&slot)) {
    Discard(&slot);
    return (*why = "no warm interpreter (it ended)"), -1;
  }
  if (spec.argv.size() < 3 || spec.argv[0] != python_ || spec.argv[1] != "-u")
    return (*why = "not a Python worker"), -1;
  if (!spec.cpus.empty()) return (*why = "bound to CPUs (--numa-affinity)"), -1;
  std::string diff = FirstDifference(slot.env, BaseEnvironment(spec.env));
  if (!diff.empty()) {
    Discard(&slot);
    return (*why = "its warm interpreter started with another " + diff), -1;
  }
  // The message: NUL-terminated strings, bytes as they are (a variable need not be UTF-8): the
  // working folder, the number of arguments, the arguments after `python -u`, the environment.
  char cwd[4096];
  std::string body = getcwd(cwd, sizeof cwd) != nullptr ? cwd : "";
  body += '\0' + std::to_string(spec.argv.size() - 2) + '\0';
  for (size_t i = 2; i < spec.argv.size(); ++i) body += spec.argv[i] + '\0';
  for (const std::string& kv : spec.env) body += kv + '\0';
  uint32_t len = static_cast<uint32_t>(body.size());
  char head[4];
  std::memcpy(head, &len, 4);
  // The two descriptors travel with the first bytes (SCM_RIGHTS).
  int fds[2] = {stdout_fd, stderr_fd};
  char control[CMSG_SPACE(sizeof fds)] = {};
  iovec iov{head, sizeof head};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof fds);
  std::memcpy(CMSG_DATA(c), fds, sizeof fds);
  ssize_t sent;
  do sent = sendmsg(slot.sock, &m, MSG_NOSIGNAL);
  while (sent < 0 && errno == EINTR);
  if (sent != static_cast<ssize_t>(sizeof head) || !SendAll(slot.sock, body.data(), body.size())) {
    *why = std::string("the hand-over failed: ") + std::strerror(errno);
    Discard(&slot);
    return -1;
  }
  pid_t pid = slot.pid;
  if (!slot.ready) *why = "it was still importing";  // still ahead of a fresh process
  close(slot.sock);
  slot = Slot{};
  return pid;
}

}  // namespace xtimer::run
