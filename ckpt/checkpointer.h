// One rank's checkpointer: what xtimer.ckpt.Checkpointer calls (and a C++ program may use
// directly). It owns the rank's segment, makes sure the node's saver runs, waits for disk
// writes and reports their failures. Falls back to writing disk saves itself when no saver
// program can be started.
#pragma once

#include <memory>
#include <string>

#include "ckpt/persist.h"
#include "ckpt/saver.h"
#include "ckpt/segment.h"

namespace xtimer::ckpt {

struct CheckpointerOptions {
  std::string ckpt_dir;  // absolute
  int rank = 0;
  std::string shm_dir;          // "" : XTIMER_CKPT_SHM_DIR
  int keep = -1;                // < 0: XTIMER_CKPT_KEEP
  int persist_on_failure = -1;  // < 0: XTIMER_CKPT_PERSIST_ON_FAILURE
  std::string saver_binary;     // "": no saver process, disk saves are written by the caller
  double saver_idle_exit_s = 300;
  int threads = 0;  // copy threads; 0: automatic
};

class RankCheckpointer {
 public:
  static Status Create(const CheckpointerOptions& options, std::unique_ptr<RankCheckpointer>* out);
  ~RankCheckpointer();

  // Saves (args.disk: and asks for it on disk). A memory save whose target slot is busy is
  // skipped (*saved = false, *why says why); a disk save waits for it.
  Status Save(SaveArgs args, bool* saved, std::string* why);
  // Pins the newest snapshot in memory for a load. NotFound if there is none.
  Status LeaseMemory(ReadLease* lease);
  // Blocks until every disk save asked for is durable (timeout_s < 0: no limit). Returns the
  // failure of one that failed.
  Status Wait(double timeout_s, const ProgressFn& progress);
  // The newest step this rank has on disk according to the control page; -1 none.
  int64_t PersistedStep() const;
  // A clean end: the saver does not treat the process as failed.
  void Close();

  // The rank's segment; null while its name is held by a file that is not this user's own
  // (Status::Code::kUntrusted, segment.h): then LeaseMemory returns that error (a load goes to
  // the disk), Save tries to create the segment again and returns the error if it still cannot.
  Segment* segment() { return seg_.get(); }
  std::string ctl_path() const;
  // Some disk save asked for is not written yet.
  bool DiskPending() const;
  const CheckpointerOptions& options() const { return opt_; }
  bool inline_persist() const { return inline_; }

 private:
  RankCheckpointer() = default;
  Status Prepare();
  Status PersistPendingInline();
  Status CheckFailures();
  CheckpointerOptions opt_;
  std::unique_ptr<Segment> seg_;
  Status segment_error_;  // why seg_ is null
  bool claimed_ = false;
  bool inline_ = false;
  int64_t reported_failure_ = -1;
};

}  // namespace xtimer::ckpt
