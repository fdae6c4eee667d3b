// The workers of one node in one round: started together with torchrun's environment, watched,
// stopped together. Each worker leads its own session, as under torchrun (so stopping its
// process group reaches what it started, and the kernel's autogroup scheduler gives it its own
// share of the CPUs) and dies with xtimer_run (PR_SET_PDEATHSIG), so no worker outlives its agent.
// Its stderr passes through a pipe: to the terminal (and/or a file under --log-dir) and into a
// short tail kept for the failure summary. A worker may be bound to a set of CPUs
// (--numa-affinity) and kept off the terminal (--local-ranks-filter; its files and tail stay).
//
// Threads: Start/Poll/Stop from the agent's main thread only; one reader thread per group
// forwards the pipes. Reaping is Poll's job: the caller blocks SIGCHLD (ChildProcess::BlockSignals).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <deque>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace xtimer::run {

struct WorkerSpec {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // KEY=VALUE, the whole environment
  int local_rank = 0;
  int rank = 0;
  std::string stdout_file, stderr_file;         // "" = the terminal
  bool tee_stdout = false, tee_stderr = false;  // the file and the terminal
  bool console = true;                          // false: nothing of it on the terminal
  std::vector<int> cpus;                        // its CPU affinity (empty: xtimer_run's own)
  std::string tee_prefix;  // put before each line a tee'd stream shows on the terminal ("[default0]:")
  std::string error_file;  // its TORCHELASTIC_ERROR_FILE ("" = none)
};

struct WorkerExit {
  int local_rank = -1, rank = -1;
  pid_t pid = -1;
  int status = 0;     // wait status
  double when_s = 0;  // monotonic seconds
  int64_t when_unix_ms = 0;
  std::vector<std::string> stderr_tail;
  std::string error_file;        // the worker's error file when it wrote one (torch's @record)
  std::string Describe() const;  // "exit code 1" / "signal 9 (SIGKILL)"
};

class WarmPool;

// `prog` searched on PATH as execvp would ("" when not found); a name with a '/' as it is.
std::string ResolveProgram(const std::string& prog);

class WorkerGroup {
 public:
  enum class State { kRunning, kSucceeded, kFailed };

  WorkerGroup() = default;
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Starts every worker: handed to `warm`'s interpreter of its local rank where it has a ready
  // one (warm_pool.h), else a fresh process. False with *error if one could not be started (the
  // others are stopped).
  bool Start(const std::vector<WorkerSpec>& specs, std::string* error, WarmPool* warm = nullptr);
  // Reaps what ended. kFailed as soon as one worker ended other than with exit 0; kSucceeded
  // when all ended with 0.
  State Poll();
  // SIGTERM to every worker's process group, SIGKILL after `grace_s`; waits until all are reaped.
  void Stop(double grace_s);
  // The first worker that failed (valid once Poll returned kFailed), and the others that failed
  // on their own before Stop signalled them, in the order they were reaped.
  const WorkerExit& first_failure() const { return first_failure_; }
  const std::vector<WorkerExit>& other_failures() const { return other_failures_; }
  std::vector<pid_t> pids() const;
  bool empty() const { return workers_.empty(); }

 private:
  struct Worker {
    WorkerSpec spec;
    pid_t pid = -1;
    bool done = false;
    int status = 0;
    int out_fd = -1, err_fd = -1;      // our ends of the pipes (-1: none)
    int out_file = -1, err_file = -1;  // --log-dir files
    std::string out_partial, err_partial;
    std::string out_tee, err_tee;  // a tee'd stream's line not yet shown (no newline yet)
    std::deque<std::string> tail;
  };
  void ReaderLoop();
  // Passes one read of a pipe on; false when nothing more is there now (or it closed).
  bool Forward(Worker& w, int* fd, bool is_err);
  void Reaped(pid_t pid, int status);
  void JoinReader();

  std::vector<Worker> workers_;
  std::map<pid_t, size_t> index_;
  // Each worker's tail and err_partial, shared with the reader (a rule in words: the analysis
  // cannot name mu_ from a Worker). The fds are the reader's until JoinReader.
  Mutex mu_;
  std::thread reader_;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_reader_{false};
  WorkerExit first_failure_;
  std::vector<WorkerExit> other_failures_;
  bool failed_ = false;
  bool stopping_ = false;  // Stop has signalled the workers: exits from now on are not failures of their own
};

// Reaps children that are not ours (orphans handed to a subreaper). Returns how many.
int ReapStrays();

}  // namespace xtimer::run
