#include "launcher/agent/child_process.h"

#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace xtimer {
namespace {

// Signals a job's launcher (torchrun, a scheduler, a user with kill) sends that the command
// must see.
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT};

sigset_t HandledSet() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : kForwarded) sigaddset(&set, s);
  sigaddset(&set, SIGCHLD);
  return set;
}

}  // namespace

void ChildProcess::BlockSignals() {
  sigset_t set = HandledSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

bool ChildProcess::Spawn(const std::vector<std::string>& argv, std::string* error, int* exit_code) {
  // Orphaned grandchildren (a rank whose torchrun died) are reparented to us and reaped.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults = HandledSet();
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  int rc = posix_spawnp(&pid_, args[0], nullptr, &attr, args.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    *error = "cannot run " + argv[0] + ": " + std::strerror(rc);
    *exit_code = rc == ENOENT ? 127 : 126;
    pid_ = -1;
    return false;
  }
  return true;
}

int ChildProcess::Wait(const std::function<void()>& tick) {
  sigset_t set = HandledSet();
  timespec period{0, 200 * 1000 * 1000};
  for (;;) {
    siginfo_t info;
    int sig = sigtimedwait(&set, &info, &period);
    if (sig > 0 && sig != SIGCHLD) {
      // A terminal's Ctrl-C (or Ctrl-\) already reached the child, which is in our foreground
      // process group; forwarding it would deliver it twice. Signals sent by a process are
      // forwarded.
      if (info.si_code == SI_USER || info.si_code == SI_QUEUE || info.si_code == SI_TKILL) kill(pid_, sig);
    }
    // Reap everything that ended: our child, and orphans handed to us.
    for (;;) {
      int status = 0;
      pid_t done = waitpid(-1, &status, WNOHANG);
      if (done <= 0) break;
      if (done == pid_) return status;
    }
    if (tick) tick();
  }
}

void ExitLike(int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    // Die of the same signal, so our parent (torchrun, a shell, a scheduler) sees what it
    // would have seen without us; no core file of our own.
    signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    prctl(PR_SET_DUMPABLE, 0);
    raise(sig);
    std::_Exit(128 + sig);
  }
  std::_Exit(WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 1);
}

}  // namespace xtimer
