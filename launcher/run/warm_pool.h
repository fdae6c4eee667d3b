// Warm interpreters: one Python process per local rank, started in the background while the job
// trains, that has already imported the slow modules (torch, XTIMER_WARM_IMPORTS) and waits. On a
// restart the new round's worker is handed to it (its environment, command line, working folder,
// stdout and stderr), and it runs the script as `python -u script` or `python -u -m module` would
// (launcher/run/warm_worker.py): the worker skips the interpreter's start and the imports.
//
// A warm interpreter has touched neither CUDA nor NCCL nor the job's rendezvous: it starts with
// the worker's environment less the round's identity (RANK, WORLD_SIZE, MASTER_ADDR, ...; the
// whole list is RoundVariable()), and without XTIMER_AGENT_SOCKET, so the preloaded library does
// nothing at load; the hand-over sets the identity and then calls the library's
// xtimer_python_handover(), which greets the node agent as a fresh rank does at load.
//
// A warm interpreter still importing is used all the same (it is ahead of a fresh process; it
// reads the hand-over once its imports are done). A fresh process stays the fallback: HandOver
// says no (and why) when no warm interpreter lives for that local rank, when the command is not
// `python -u ...` with the pool's Python, when the worker is bound to CPUs (--numa-affinity), or
// when any variable outside the round's identity differs from the one the interpreter started
// with (PYTHONPATH, LD_PRELOAD, OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES...: what Python, torch or
// the loader read at start).
//
// Threads: the agent's main thread only. The pool never waits for a child: a warm interpreter's
// exit is reaped by WorkerGroup::Poll or ReapStrays (waitpid(-1)) and seen here as its socket's
// hang-up.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "launcher/run/worker_group.h"

namespace xtimer::run {

// Whether `key` is one of the variables a round gives each worker (they differ between rounds
// and are set at hand-over).
bool RoundVariable(const std::string& key);

class WarmPool {
 public:
  // python: the workers' interpreter (XTIMER_PYTHON); script: warm_worker.py; imports: the
  // modules to import ahead ("torch", ...).
  WarmPool(std::string python, std::string script, std::vector<std::string> imports);
  ~WarmPool();
  WarmPool(const WarmPool&) = delete;
  WarmPool& operator=(const WarmPool&) = delete;

  // Starts a warm interpreter for each spec's local rank that has none (or one started for
  // another environment), for the next round. Failures are logged once; the pool stays empty.
  void Fill(const std::vector<WorkerSpec>& specs);

  // Hands `spec` to the warm interpreter of its local rank: it becomes the worker, with
  // `stdout_fd` and `stderr_fd` as its fd 1 and 2 (the caller keeps and closes its copies).
  // Returns its pid (*why: "" or a note, for the log), or -1 with *why (one line, for the log)
  // when a fresh process must run it.
  pid_t HandOver(const WorkerSpec& spec, int stdout_fd, int stderr_fd, std::string* why);

  // Ends every warm interpreter (SIGKILL; reaped by whoever waits next).
  void Clear();

  // The modules to import ahead: "torch,torch._dynamo" by default (DDP, FSDP and torch.compile
  // import torch._dynamo on first use, about as long as torch itself), plus XTIMER_WARM_IMPORTS.
  static std::vector<std::string> ImportsFromSettings();

 private:
  struct Slot {
    pid_t pid = -1;
    int sock = -1;                 // our end of the hand-over socket
    bool ready = false;            // it said its imports are done
    std::vector<std::string> env;  // the environment it started with (sorted, identity removed)
  };
  bool Start(int local_rank, const std::vector<std::string>& env, Slot* slot);
  // Whether the slot's interpreter is alive; reads its "ready" byte when it came.
  bool Alive(Slot* slot);
  void Discard(Slot* slot);

  std::string python_, script_;
  std::vector<std::string> imports_;
  std::vector<Slot> slots_;  // by local rank
  bool failed_ = false;      // a start failed: said once, not retried
};

}  // namespace xtimer::run
