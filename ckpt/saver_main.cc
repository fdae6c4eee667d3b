// xtimer_ckpt_saver: the node's checkpoint saver as a program (saver.h). Started on demand by
// the first save on a node (`--daemon`); exits after --idle-exit seconds with no training
// process alive and nothing left to write.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ckpt/saver.h"
#include "common/env.h"
#include "common/log.h"

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

int Usage() {
  std::fprintf(stderr,
               "usage: xtimer_ckpt_saver [--shm-dir DIR] [--idle-exit SECONDS] [--poll-ms N] [--daemon | --once]\n"
               "  Writes in-memory checkpoints of this node to disk (see docs/formats.md).\n"
               "  --shm-dir    folder of the segments (default: XTIMER_CKPT_SHM_DIR)\n"
               "  --idle-exit  exit after this long with no live training process and nothing to write\n"
               "               (default 300; negative: never)\n"
               "  --daemon     detach (new session), exit at once if a saver already runs\n"
               "  --once       one scan, then exit (no lock needed for inspection runs)\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace xtimer;
  ckpt::SaverOptions opt;
  opt.shm_dir = env::String("XTIMER_CKPT_SHM_DIR");
  bool daemon = false, once = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "xtimer_ckpt_saver: %s needs a value\n", name);
        std::exit(Usage());
      }
      return argv[++i];
    };
    if (a == "--shm-dir") opt.shm_dir = value("--shm-dir");
    else if (a == "--idle-exit") opt.idle_exit_s = std::atof(value("--idle-exit"));
    else if (a == "--poll-ms") opt.poll_ms = std::max(1, std::atoi(value("--poll-ms")));
    else if (a == "--daemon") daemon = true;
    else if (a == "--once") once = true;
    else if (a == "-h" || a == "--help") return Usage() - 2;
    else {
      std::fprintf(stderr, "xtimer_ckpt_saver: unknown argument %s\n", a.c_str());
      return Usage();
    }
  }
  ckpt::Saver saver(opt);
  std::string why;
  bool held = false;
  if (!saver.AcquireNodeLock(&why, &held)) {
    // Another saver serves this folder: nothing to do (normal when two ranks start one).
    if (daemon && held) return 0;
    std::fprintf(stderr, "xtimer_ckpt_saver: %s\n", why.c_str());
    return 1;
  }
  if (once) {
    saver.PollOnce();
    return 0;
  }
  if (daemon) {
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("xtimer_ckpt_saver: fork");
      return 1;
    }
    if (pid > 0) _exit(0);  // the lock stays with the child (same open file description)
    setsid();
    if (chdir("/") != 0) {
    }
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
      dup2(null, 0);
      dup2(null, 1);
      close(null);
    }
    if (!isatty(2)) {
      // Only our own log file (never through a link another user planted).
      int fd = -1;
      if (ckpt::OpenShmFile(opt.shm_dir + "/xtimer-ckpt-saver.log", O_WRONLY | O_APPEND, /*create=*/true, S_IFREG, &fd)
              .ok()) {
        dup2(fd, 2);
        close(fd);
      }
    }
  }
  saver.set_progress(isatty(2));
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGHUP, SIG_IGN);
  Log(LogLevel::kInfo, "checkpoint saver for %s started (idle exit after %.0f s)", opt.shm_dir.c_str(),
      opt.idle_exit_s);
  saver.Run(&g_stop);
  return 0;
}
