#include "launcher/run/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>

#include "common/clock.h"
#include "common/log.h"
#include "launcher/run/warm_pool.h"

namespace xtimer::run {
namespace {

constexpr size_t kTailLines = 20;
constexpr size_t kMaxLine = 4096;  // a longer line is cut in the tail (the terminal gets it whole)

}  // namespace

std::string ResolveProgram(const std::string& prog) {
  if (prog.find('/') != std::string::npos) return prog;
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string dir = p.substr(start, end - start);
    std::string cand = (dir.empty() ? "." : dir) + "/" + prog;
    if (access(cand.c_str(), X_OK) == 0) return cand;
    start = end + 1;
  }
  return "";
}

namespace {

void WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void CpuFree(cpu_set_t* set) { CPU_FREE(set); }

// A worker's process group, or the worker alone while it has not yet made its session (the
// group does not exist until then).
void SignalGroup(pid_t pid, int sig) {
  if (kill(-pid, sig) != 0 && errno == ESRCH) kill(pid, sig);
}

int OpenLog(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) Log(LogLevel::kWarn, "run: cannot write the worker log %s: %s", path.c_str(), std::strerror(errno));
  return fd;
}

}  // namespace

std::string WorkerExit::Describe() const {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return "signal " + std::to_string(sig) + (name ? std::string(" (SIG") + name + ")" : "");
  }
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  return "wait status " + std::to_string(status);
}

WorkerGroup::~WorkerGroup() {
  if (!workers_.empty()) Stop(0);
  JoinReader();
}

bool WorkerGroup::Start(const std::vector<WorkerSpec>& specs, std::string* error, WarmPool* warm) {
  workers_.clear();
  index_.clear();
  failed_ = false;
  stopping_ = false;
  first_failure_ = WorkerExit{};
  other_failures_.clear();
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) return (*error = "cannot create a pipe"), false;
  pid_t agent = getpid();
  sigset_t none;
  sigemptyset(&none);
  for (const WorkerSpec& spec : specs) {
    Worker w;
    w.spec = spec;
    std::string exe = ResolveProgram(spec.argv.at(0));
    if (exe.empty()) {
      *error = "cannot run " + spec.argv[0] + ": not found on PATH";
      Stop(0);
      return false;
    }
    // stdout goes through us only when it goes to a file or not to the terminal; stderr always
    // (for the tail).
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    bool out_piped = !spec.stdout_file.empty() || !spec.console;
    if ((out_piped && pipe2(out, O_CLOEXEC) != 0) || pipe2(err, O_CLOEXEC) != 0) {
      *error = std::string("cannot create a pipe: ") + std::strerror(errno);
      Stop(0);
      return false;
    }
    if (!spec.stdout_file.empty()) w.out_file = OpenLog(spec.stdout_file);
    if (!spec.stderr_file.empty()) w.err_file = OpenLog(spec.stderr_file);
    std::vector<char*> argv, envp;
    for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const std::string& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    // The CPU mask is built here: after fork only async-signal-safe calls are allowed.
    std::unique_ptr<cpu_set_t, decltype(&CpuFree)> cpus(nullptr, &CpuFree);
    size_t cpus_size = 0;
    if (!spec.cpus.empty()) {
      int n = *std::max_element(spec.cpus.begin(), spec.cpus.end()) + 1;
      cpus.reset(CPU_ALLOC(n));
      cpus_size = CPU_ALLOC_SIZE(n);
      CPU_ZERO_S(cpus_size, cpus.get());
      for (int c : spec.cpus) CPU_SET_S(c, cpus_size, cpus.get());
    }

    std::string why;
    pid_t pid = warm != nullptr ? warm->HandOver(spec, out_piped ? out[1] : STDOUT_FILENO, err[1], &why) : -1;
    if (pid > 0) {
      Log(LogLevel::kInfo, "run: rank %d started in a warm interpreter (pid %d%s%s)", spec.rank, static_cast<int>(pid),
          why.empty() ? "" : "; ", why.c_str());
    } else {
      if (warm != nullptr) Log(LogLevel::kInfo, "run: rank %d starts fresh: %s", spec.rank, why.c_str());
      pid = fork();
    }
    if (pid < 0) {
      *error = std::string("cannot start a worker: fork: ") + std::strerror(errno);
      Stop(0);
      return false;
    }
    if (pid == 0) {
      // The child: async-signal-safe calls only. A session of its own, as torchrun gives each
      // worker (start_new_session): its process group is what Stop() signals, and with the
      // kernel's autogroup scheduling (sched_autogroup_enabled, on by default) each session gets
      // its own share of the CPUs. Sharing the agent's session, two workers importing torch on a
      // busy 2-core machine took 6.6-7.8 s against 3.8-4.2 s in sessions of their own.
      setsid();
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != agent) _exit(127);  // the agent died before the line above
      for (int s = 1; s < NSIG; ++s) signal(s, SIG_DFL);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      if (out_piped) dup2(out[1], STDOUT_FILENO);
      dup2(err[1], STDERR_FILENO);
      if (cpus && sched_setaffinity(0, cpus_size, cpus.get()) != 0) {
        static const char msg[] = "xtimer_run: cannot bind the worker to its NUMA node's CPUs; it runs unbound\n";
        (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
      }
      execve(exe.c_str(), argv.data(), envp.data());
      static const char msg[] = "xtimer_run: cannot execute the worker\n";
      (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
      _exit(126);
    }
    w.pid = pid;
    if (out_piped) {
      close(out[1]);
      w.out_fd = out[0];
    }
    close(err[1]);
    w.err_fd = err[0];
    index_[pid] = workers_.size();
    workers_.push_back(std::move(w));
  }
  stop_reader_ = false;
  reader_ = std::thread([this] { ReaderLoop(); });
  return true;
}

bool WorkerGroup::Forward(Worker& w, int* fd, bool is_err) {
  char buf[16384];
  ssize_t n = read(*fd, buf, sizeof buf);
  if (n < 0 && errno == EINTR) return true;
  if (n < 0 && errno == EAGAIN) return false;
  if (n <= 0) {
    close(*fd);
    *fd = -1;
    std::string& pending = is_err ? w.err_tee : w.out_tee;
    if (!pending.empty()) {  // the last line had no newline
      std::string line = w.spec.tee_prefix + pending + "\n";
      WriteAll(is_err ? STDERR_FILENO : STDOUT_FILENO, line.data(), line.size());
      pending.clear();
    }
    return false;
  }
  const WorkerSpec& s = w.spec;
  int file = is_err ? w.err_file : w.out_file;
  bool to_file = file >= 0;
  bool to_terminal = s.console && (!to_file || (is_err ? s.tee_stderr : s.tee_stdout));
  if (to_file) WriteAll(file, buf, static_cast<size_t>(n));
  if (to_terminal) {
    int term = is_err ? STDERR_FILENO : STDOUT_FILENO;
    if (to_file && !s.tee_prefix.empty()) {
      // torchrun shows a tee'd stream line by line, each after "[<role><local rank>]:": whole
      // lines only, in one write each, so that two workers' lines never run into each other.
      std::string& pending = is_err ? w.err_tee : w.out_tee;
      pending.append(buf, static_cast<size_t>(n));
      size_t done = 0;
      for (size_t nl; (nl = pending.find('\n', done)) != std::string::npos; done = nl + 1) {
        std::string line = s.tee_prefix + pending.substr(done, nl + 1 - done);
        WriteAll(term, line.data(), line.size());
      }
      pending.erase(0, done);
      if (pending.size() > kMaxLine) {  // a very long line goes out in pieces
        std::string piece = s.tee_prefix + pending + "\n";
        WriteAll(term, piece.data(), piece.size());
        pending.clear();
      }
    } else {
      WriteAll(term, buf, static_cast<size_t>(n));
    }
  }
  if (!is_err) return true;
  MutexLock lock(mu_);
  for (ssize_t i = 0; i < n; ++i) {
    if (buf[i] == '\n') {
      w.tail.push_back(std::move(w.err_partial));
      w.err_partial.clear();
      if (w.tail.size() > kTailLines) w.tail.pop_front();
    } else if (w.err_partial.size() < kMaxLine) {
      w.err_partial.push_back(buf[i]);
    }
  }
  return true;
}

void WorkerGroup::ReaderLoop() {
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<size_t, bool>> who;
    fds.push_back({wake_[0], POLLIN, 0});
    who.push_back({0, false});
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (workers_[i].out_fd >= 0) fds.push_back({workers_[i].out_fd, POLLIN, 0}), who.push_back({i, false});
      if (workers_[i].err_fd >= 0) fds.push_back({workers_[i].err_fd, POLLIN, 0}), who.push_back({i, true});
    }
    if (fds.size() == 1) return;  // every pipe closed
    if (poll(fds.data(), fds.size(), 500) < 0 && errno != EINTR) return;
    if (fds[0].revents) {
      char c[64];
      while (read(wake_[0], c, sizeof c) > 0) {
      }
      if (stop_reader_) {
        // Forward what is already in the pipes, then stop.
        for (Worker& w : workers_) {
          for (int* fd : {&w.out_fd, &w.err_fd}) {
            if (*fd >= 0) fcntl(*fd, F_SETFL, O_NONBLOCK);
            while (*fd >= 0 && Forward(w, fd, fd == &w.err_fd)) {
            }
          }
        }
        return;
      }
    }
    for (size_t k = 1; k < fds.size(); ++k) {
      if (!fds[k].revents) continue;
      Worker& w = workers_[who[k].first];
      Forward(w, who[k].second ? &w.err_fd : &w.out_fd, who[k].second);
    }
  }
}

void WorkerGroup::Reaped(pid_t pid, int status) {
  auto it = index_.find(pid);
  if (it == index_.end()) return;
  Worker& w = workers_[it->second];
  w.done = true;
  w.status = status;
  bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (ok || stopping_) return;
  WorkerExit e;
  e.local_rank = w.spec.local_rank;
  e.rank = w.spec.rank;
  e.pid = pid;
  e.status = status;
  e.when_s = MonotonicS();
  e.when_unix_ms = WallMs();
  if (!w.spec.error_file.empty() && access(w.spec.error_file.c_str(), F_OK) == 0) e.error_file = w.spec.error_file;
  if (!failed_) {
    failed_ = true;
    first_failure_ = std::move(e);
  } else {
    other_failures_.push_back(std::move(e));
  }
}

WorkerGroup::State WorkerGroup::Poll() {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    Reaped(pid, status);
  }
  if (failed_) return State::kFailed;
  for (const Worker& w : workers_)
    if (!w.done) return State::kRunning;
  return State::kSucceeded;
}

void WorkerGroup::Stop(double grace_s) {
  if (workers_.empty()) return;
  Poll();
  stopping_ = true;
  auto signal_all = [&](int sig) {
    for (const Worker& w : workers_)
      if (!w.done) SignalGroup(w.pid, sig);
  };
  signal_all(SIGTERM);
  double deadline = MonotonicS() + grace_s;
  bool killed = false;
  for (;;) {
    bool all = true;
    for (;;) {
      int status = 0;
      pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      Reaped(pid, status);
    }
    for (const Worker& w : workers_) all = all && w.done;
    if (all) break;
    if (!killed && MonotonicS() >= deadline) {
      signal_all(SIGKILL);
      killed = true;
    }
    usleep(20 * 1000);
  }
  // A worker's own children (its process group) go too.
  for (const Worker& w : workers_) kill(-w.pid, SIGKILL);  // reaped: their sessions exist
  JoinReader();
  // The failed worker's last words (the pipes are drained now).
  if (failed_) {
    MutexLock lock(mu_);
    for (Worker& w : workers_) {
      if (w.pid != first_failure_.pid) continue;
      if (!w.err_partial.empty()) w.tail.push_back(w.err_partial);
      first_failure_.stderr_tail.assign(w.tail.begin(), w.tail.end());
    }
  }
  for (Worker& w : workers_) {
    for (int* fd : {&w.out_fd, &w.err_fd, &w.out_file, &w.err_file})
      if (*fd >= 0) close(*fd), *fd = -1;
  }
  workers_.clear();
  index_.clear();
}

void WorkerGroup::JoinReader() {
  if (reader_.joinable()) {
    stop_reader_ = true;
    if (wake_[1] >= 0) (void)!write(wake_[1], "x", 1);
    reader_.join();
  }
  for (int& fd : wake_)
    if (fd >= 0) close(fd), fd = -1;
}

std::vector<pid_t> WorkerGroup::pids() const {
  std::vector<pid_t> out;
  for (const Worker& w : workers_) out.push_back(w.pid);
  return out;
}

int ReapStrays() {
  int n = 0;
  int status;
  while (waitpid(-1, &status, WNOHANG) > 0) ++n;
  return n;
}

}  // namespace xtimer::run
