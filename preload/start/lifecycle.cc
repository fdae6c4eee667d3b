// Process-level glue: what runs at load, and fork handling.
//
// At load, in a process below xtimer_launch / xtimer_run (XTIMER_AGENT_SOCKET set) or with RANK
// set, unless XTIMER_DISABLE=1: the dump signal's handler is installed when the program has
// none (capture/dumper.h, InstallAtLoad), and a rank says hello to its node agent
// (agent_hello.h). Both are a few system calls: no thread starts and nothing is loaded until a
// dump signal comes or the first hooked CUDA call creates the tracker and its threads. A warm
// interpreter of xtimer_run does the same at its hand-over (xtimer_python_handover).
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/env.h"
#include "preload/base/real_function.h"
#include "preload/capture/dumper.h"
#include "preload/link/agent_hello.h"
#include "preload/start/tracker.h"

namespace {

// A process a rank started with the rank's own environment (a data-loader worker of the
// "spawn" or "forkserver" kind) is not the rank: its parent was started under the library with
// the same RANK, LOCAL_RANK and WORLD_SIZE. Such a helper must not say hello as the rank, nor
// write the rank's stack file. All three are compared because a launcher may itself carry a RANK
// (a Kubernetes PyTorchJob gives torchrun the node's RANK and WORLD_SIZE, but no LOCAL_RANK), and
// its worker of the same RANK is a rank, not a helper.
//
// A rank xtimer_run started in a warm interpreter (launcher/run/warm_pool.h) got its identity
// after it started, so /proc shows none: its hand-over sets XTIMER_RANK_PID to its pid, and any
// other process that carries that variable was started by it (or by its helpers).
bool IsRankHelper() {
  if (const char* rank_pid = std::getenv("XTIMER_RANK_PID"); rank_pid != nullptr && *rank_pid != '\0')
    return std::strtol(rank_pid, nullptr, 10) != static_cast<long>(getpid());
  static const char* const kKeys[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE"};
  std::string ours[3], theirs[3];
  for (int i = 0; i < 3; ++i) {
    const char* v = std::getenv(kKeys[i]);
    ours[i] = v != nullptr ? std::string(kKeys[i]) + "=" + v : "";
  }
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/environ", static_cast<int>(getppid()));
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return false;
  bool preloaded = false;
  std::string entry;
  for (int c = std::fgetc(f);; c = std::fgetc(f)) {
    if (c == EOF || c == '\0') {
      for (int i = 0; i < 3; ++i)
        if (entry.rfind(std::string(kKeys[i]) + "=", 0) == 0) theirs[i] = entry;
      if (entry.rfind("LD_PRELOAD=", 0) == 0 && entry.find("libxtimer_preload") != std::string::npos) preloaded = true;
      entry.clear();
      if (c == EOF) break;
    } else if (entry.size() < 4096) {
      entry += static_cast<char>(c);
    }
  }
  std::fclose(f);
  return preloaded && ours[0] == theirs[0] && ours[1] == theirs[1] && ours[2] == theirs[2];
}

void AtLoad() {
  if (xtimer::env::Bool("XTIMER_DISABLE")) return;
  const char* rank = std::getenv("RANK");
  const bool is_rank = rank != nullptr && *rank != '\0';
  const bool under_agent = !xtimer::env::String("XTIMER_AGENT_SOCKET").empty();
  if (!is_rank && !under_agent) return;  // the first CUDA call sets everything up, as it always did
  static std::atomic<bool> once{false};
  if (once.exchange(true)) return;  // a hand-over in a process that was a rank at load
  const bool helper = is_rank && IsRankHelper();
  // Only a launched worker (torchrun, xtimer_run and DeepSpeed set LOCAL_RANK) says hello as a
  // rank: a launcher that carries a node's RANK of its own (torchrun in a PyTorchJob) is not one.
  const bool worker = is_rank && std::getenv("LOCAL_RANK") != nullptr;
  const bool hello = worker && !helper && under_agent && xtimer::ConnectAtLoad();
  // With the agent told of each dump, the agent symbolises (as with the link thread).
  const int dump_signal = xtimer::capture::Dumper::Instance().InstallAtLoad(!helper, hello ? "none" : "");
  if (hello) xtimer::SendHelloAtLoad(dump_signal);
}

__attribute__((constructor)) void RegisterForkHandler() {
  pthread_atfork(nullptr, nullptr, [] { xtimer::Tracker::AfterForkInChild(); });
  AtLoad();
}

}  // namespace

// A warm interpreter became a rank (launcher/run/warm_worker.py, after it set the rank's
// environment): what a fresh rank does at load happens now. It started without RANK or
// XTIMER_AGENT_SOCKET, so nothing of this ran at its load.
XTIMER_EXPORT void xtimer_python_handover() { AtLoad(); }
