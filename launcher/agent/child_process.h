// The command xtimer_launch runs, as its child, with its fate passed through like `timeout` or
// `tini` do: signals sent to us (kill, a scheduler's SIGTERM) go to the child, and we end the
// way the child ended (its exit code, or the same signal).
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace xtimer {

class ChildProcess {
 public:
  // Blocks the forwarded signals and SIGCHLD in the calling thread; call before starting any
  // other thread so that none of them takes these signals.
  static void BlockSignals();

  // Starts `argv` (PATH searched) with the usual signal mask and dispositions. On failure
  // *error is one line and *exit_code what a shell would return (127 not found, 126 not runnable).
  bool Spawn(const std::vector<std::string>& argv, std::string* error, int* exit_code);

  // Until the child ends: forwards signals, reaps orphans (we are a subreaper), calls `tick`
  // about every 200 ms. Returns the child's wait status.
  int Wait(const std::function<void()>& tick);

  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

// Ends this process the way a child with `wait_status` ended.
[[noreturn]] void ExitLike(int wait_status);

}  // namespace xtimer
