// A child process whose stdout is read line by line against deadlines, and killed when it
// overruns one. xtimer_netprobe's nccl backend and xtimer_run's GPU checks run their GPU work in
// such a child (the same executable with an internal flag), so a hung CUDA or NCCL call can never
// hang the caller.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/net/net.h"

namespace xtimer::net {

class Child {
 public:
  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() { Kill(); }

  bool Spawn(const std::vector<std::string>& argv, std::string* error);
  // The next line of stdout that starts with `marker` (the marker is stripped); other lines go
  // to our stderr. False at end of output, on error, or at the deadline (*error says which).
  bool ReadMarkedLine(const std::string& marker, std::string* line, Deadline deadline, std::string* error);
  // SIGKILL (if still running) and reap.
  void Kill();
  // Waits for a normal exit until the deadline, then kills. Returns the exit status or -1.
  int Wait(Deadline deadline);

 private:
  pid_t pid_ = -1;
  Fd out_;
  std::string buf_;
};

// Path of the running executable.
std::string SelfExe();

}  // namespace xtimer::net
