#include "common/net/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

extern char** environ;

namespace xtimer::net {

std::string SelfExe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

bool Child::Spawn(const std::vector<std::string>& argv, std::string* error) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) {
    *error = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], STDOUT_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int rc = posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(p[1]);
  if (rc != 0) {
    close(p[0]);
    pid_ = -1;
    *error = "cannot start " + argv[0] + ": " + std::strerror(rc);
    return false;
  }
  out_.reset(p[0]);
  fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
  return true;
}

bool Child::ReadMarkedLine(const std::string& marker, std::string* line, Deadline deadline, std::string* error) {
  for (;;) {
    size_t nl;
    while ((nl = buf_.find('\n')) != std::string::npos) {
      std::string l = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      if (l.rfind(marker, 0) == 0) {
        *line = l.substr(marker.size());
        return true;
      }
      l += '\n';
      ssize_t ignored = write(STDERR_FILENO, l.data(), l.size());  // the library's own chatter
      (void)ignored;
    }
    if (buf_.size() > (1u << 20)) buf_.clear();  // a runaway line: drop it
    if (!out_.valid()) {
      *error = "the worker ended without an answer";
      return false;
    }
    pollfd pfd{out_.get(), POLLIN, 0};
    int r = poll(&pfd, 1, deadline.poll_ms());
    if (r < 0 && errno != EINTR) {
      *error = std::string("poll: ") + std::strerror(errno);
      return false;
    }
    if (r == 0 && deadline.passed()) {
      *error = "the worker did not answer before the deadline";
      return false;
    }
    if (r <= 0) continue;
    char chunk[4096];
    ssize_t n = read(out_.get(), chunk, sizeof chunk);
    if (n > 0) {
      buf_.append(chunk, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      out_.reset();
    }
  }
}

void Child::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  out_.reset();
}

int Child::Wait(Deadline deadline) {
  if (pid_ <= 0) return -1;
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      out_.reset();
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (r < 0 && errno != EINTR) return -1;
    if (deadline.passed()) {
      Kill();
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace xtimer::net
