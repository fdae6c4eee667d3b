// xtimer_launch COMMAND [ARGS...]: runs COMMAND with libxtimer_preload.so preloaded, so every
// process it starts (python, torchrun and its ranks, deepspeed) is timed. xtimer_launch stays
// as COMMAND's parent and runs the node agent (launcher/agent/node_agent.h) beside it; exit status and
// signals are passed through. Below another xtimer_launch (XTIMER_AGENT_SOCKET already set) it
// just runs COMMAND, which reports to the agent above.
#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/log.h"
#include "launcher/preload_env.h"
#ifdef XTIMER_WITH_AGENT
#include "launcher/agent/child_process.h"
#include "launcher/agent/node_agent.h"
#endif

namespace {

void Usage(FILE* out) {
  std::fprintf(out,
               "usage: xtimer_launch [--] COMMAND [ARGS...]\n"
               "Runs COMMAND with libxtimer_preload.so preloaded: CUDA, cuBLAS and NCCL operations of every\n"
               "process below it are timed on the GPU and watched for hangs. Outputs go to\n"
               "$XTIMER_TIMELINE_PATH (default /tmp/xtimer); all settings: docs/config.md.\n"
               "examples:\n"
               "  xtimer_launch python train.py\n"
               "  xtimer_launch torchrun --nproc-per-node 8 train.py\n");
}

}  // namespace

int main(int argc, char** argv) {
  int first = 1;
  if (first < argc && (std::strcmp(argv[first], "-h") == 0 || std::strcmp(argv[first], "--help") == 0)) {
    Usage(stdout);
    return 0;
  }
  if (first < argc && std::strcmp(argv[first], "--") == 0) ++first;
  if (first >= argc) {
    Usage(stderr);
    return 2;
  }
  if (argv[first][0] == '-') {
    std::fprintf(stderr, "xtimer_launch: unknown option %s (put the command after --)\n", argv[first]);
    return 2;
  }

  std::string preload_error;
  if (!xtimer::SetPreloadEnvironment(&preload_error)) {
    std::fprintf(stderr, "xtimer_launch: %s\n", preload_error.c_str());
    return 2;
  }

#ifdef XTIMER_WITH_AGENT
  if (xtimer::env::String("XTIMER_AGENT_SOCKET").empty()) {
    xtimer::ChildProcess::BlockSignals();  // before any thread exists
    xtimer::NodeAgent agent(xtimer::AgentConfig::FromEnv());
    std::string error;
    if (agent.Start(&error)) {
      setenv("XTIMER_AGENT_SOCKET", agent.SocketPath().c_str(), 1);  // for the command below
      xtimer::ChildProcess child;
      int code = 0;
      if (!child.Spawn(std::vector<std::string>(argv + first, argv + argc), &error, &code)) {
        agent.Stop();
        std::fprintf(stderr, "xtimer_launch: %s\n", error.c_str());
        return code;
      }
      int status = child.Wait([&] { agent.Tick(); });
      agent.Stop();
      xtimer::ExitLike(status);
    }
    xtimer::Log(xtimer::LogLevel::kWarn, "agent: %s; running the command without a node agent", error.c_str());
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_UNBLOCK, &all, nullptr);
  }
#endif
  execvp(argv[first], argv + first);
  int err = errno;
  std::fprintf(stderr, "xtimer_launch: cannot run %s: %s\n", argv[first], std::strerror(err));
  return err == ENOENT ? 127 : 126;  // the shell's conventions
}
