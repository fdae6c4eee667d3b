// Process-level glue: what runs at load, and fork handling.
//
// At load, in a process below xtimer_launch / xtimer_run (XTIMER_AGENT_SOCKET set) or with RANK
// set, unless XTIMER_DISABLE=1: the dump signal's handler is installed when the program has
// none (capture/dumper.h, InstallAtLoad), and a rank says hello to its node agent
// (agent_hello.h). Both are a few system calls: no thread starts and nothing is loaded until a
// dump signal comes or the first hooked CUDA call creates the tracker and its threads.
#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/env.h"
#include "preload/agent_hello.h"
#include "preload/capture/dumper.h"
#include "preload/tracker.h"

namespace {

// A process a rank started with the rank's own environment (a data-loader worker of the
// "spawn" or "forkserver" kind) is not the rank: its parent was started under the library with
// the same RANK. Such a helper must not say hello as the rank, nor write the rank's stack file.
bool IsRankHelper(const char* rank) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/environ", static_cast<int>(getppid()));
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return false;
  const std::string want_rank = std::string("RANK=") + rank;
  bool same_rank = false, preloaded = false;
  std::string entry;
  for (int c = std::fgetc(f);; c = std::fgetc(f)) {
    if (c == EOF || c == '\0') {
      if (entry == want_rank) same_rank = true;
      if (entry.rfind("LD_PRELOAD=", 0) == 0 && entry.find("libxtimer_preload") != std::string::npos) preloaded = true;
      entry.clear();
      if (c == EOF) break;
    } else if (entry.size() < 4096) {
      entry += static_cast<char>(c);
    }
  }
  std::fclose(f);
  return same_rank && preloaded;
}

void AtLoad() {
  if (xtimer::env::Bool("XTIMER_DISABLE")) return;
  const char* rank = std::getenv("RANK");
  const bool is_rank = rank != nullptr && *rank != '\0';
  const bool under_agent = !xtimer::env::String("XTIMER_AGENT_SOCKET").empty();
  if (!is_rank && !under_agent) return;  // the first CUDA call sets everything up, as it always did
  const bool helper = is_rank && IsRankHelper(rank);
  const bool hello = is_rank && !helper && under_agent && xtimer::ConnectAtLoad();
  // With the agent told of each dump, the agent symbolises (as with the link thread).
  const int dump_signal = xtimer::capture::Dumper::Instance().InstallAtLoad(!helper, hello ? "none" : "");
  if (hello) xtimer::SendHelloAtLoad(dump_signal);
}

__attribute__((constructor)) void RegisterForkHandler() {
  pthread_atfork(nullptr, nullptr, [] { xtimer::Tracker::AfterForkInChild(); });
  AtLoad();
}

}  // namespace
