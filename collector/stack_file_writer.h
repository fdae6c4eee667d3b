// Writes the dump rounds' stack files on one background thread (nice 10), off the upload's path:
// creating thousands of files costs the kernel more than parsing them, and an upload call should
// not wait for it.
//
// Guarantees:
//   - every file is created new (O_CREAT | O_EXCL | O_NOFOLLOW): nothing already there is followed
//     or replaced; a file that cannot be written is logged and removed (the merge still has it);
//   - WaitFor(group) returns once every file queued under that group is on disk (or after the
//     timeout): a round's stack files are written before its merge outputs are;
//   - at most 128 MiB wait in the queue; beyond that, Write writes the file itself, in the
//     caller's thread (backpressure instead of unbounded memory);
//   - the destructor writes what is queued, then joins the thread.
//
// Thread-safe: any thread may call Write and WaitFor. One mutex guards the queue and every
// Group's count (the analysis cannot name the writer's mutex from a Group: that rule stays in
// words); it is never held while a file is written. The thread starts with the first Write.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "common/mutex.h"

namespace xtimer::collector {

class StackFileWriter {
 public:
  // The files of one dump round: WaitFor(group) waits for them. Its count is guarded by the
  // writer's mutex; hold it in a shared_ptr (queued jobs keep it alive).
  struct Group {
    int pending = 0;
  };

  StackFileWriter() = default;
  ~StackFileWriter();
  StackFileWriter(const StackFileWriter&) = delete;
  StackFileWriter& operator=(const StackFileWriter&) = delete;

  // Queues `bytes` for a new file at `path` (or writes it now when the queue is full).
  void Write(std::string path, const std::string& bytes, const std::shared_ptr<Group>& group) XT_EXCLUDES(mu_);
  // Waits until every file of `group` is written or `timeout_s` passed; returns how many are
  // still not written (0: all).
  int WaitFor(const Group& group, double timeout_s) XT_EXCLUDES(mu_);

 private:
  struct Job {
    std::string path, bytes;
    std::shared_ptr<Group> group;
  };
  void Loop() XT_EXCLUDES(mu_);

  Mutex mu_;  // also guards every Group::pending
  CondVar queued_cv_, written_cv_;
  std::deque<Job> queue_ XT_GUARDED_BY(mu_);
  size_t queue_bytes_ XT_GUARDED_BY(mu_) = 0;
  bool stop_ XT_GUARDED_BY(mu_) = false;
  std::thread thread_ XT_GUARDED_BY(mu_);  // started by the first Write
};

// Creates `path` new and writes `bytes` into it (see above); logs and removes it on failure.
void WriteNewFile(const std::string& path, const std::string& bytes);

}  // namespace xtimer::collector
