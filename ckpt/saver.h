// The saver: the process on each node that writes in-memory checkpoints to disk behind the
// training processes. It is a library so that the node agent (xtimer_launch, later xtimer_run)
// can run it in-process; `xtimer_ckpt_saver` is the standalone form that the first save on a
// node starts when no agent runs one.
//
// One per node (per shared-memory folder): whoever holds an exclusive flock on
// SHM_DIR/xtimer-ckpt-saver.lock is the saver. It scans SHM_DIR for segments every poll and
//  - writes every slot a disk save asked for (oldest step first), then moves DIR/latest when
//    every rank's file of that step is on disk, and deletes old steps (XTIMER_CKPT_KEEP);
//  - when a segment's training process died without closing it, writes the newest complete
//    snapshots newer than what is on disk (XTIMER_CKPT_PERSIST_ON_FAILURE, per segment);
//  - exits after `idle_exit_s` with no live training process and nothing to write, removing
//    the segments whose snapshot is on disk or whose process closed them cleanly; segments
//    that hold the only copy of a snapshot are kept and listed in its log. It also exits when
//    SHM_DIR itself is removed.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "ckpt/persist.h"
#include "ckpt/segment.h"
#include "ckpt/status.h"
#include "common/mutex.h"

namespace xtimer::ckpt {

std::string SaverLockPath(const std::string& shm_dir);
// A FIFO the saver waits on between scans: a disk save writes a byte to it so that the write
// starts at once rather than at the next poll.
std::string SaverWakePath(const std::string& shm_dir);
void WakeSaver(const std::string& shm_dir);
// True if some process holds the node's saver lock.
bool SaverRunning(const std::string& shm_dir);

// Writes one slot of a segment to DIR/<step>/rank_<r>.xtc and records the outcome in the
// control page (disk state, persisted step, or failed step and error). Then finishes the
// step (latest, keep). Used by the saver and by a training process that has no saver.
Status PersistSlot(Segment& seg, int slot, const ProgressFn& progress, int64_t* step_out);

struct SaverOptions {
  std::string shm_dir;
  double idle_exit_s = 300;  // < 0: never exit
  int poll_ms = 100;
  bool progress = false;  // progress lines on stderr (a terminal) for writes over 2 s
};

class Saver {
 public:
  explicit Saver(SaverOptions options);
  ~Saver();
  // Takes the node lock; false and why if another saver has it (*held_by_another) or the lock
  // file is not this user's own (OpenShmFile's rule, segment.h).
  bool AcquireNodeLock(std::string* why, bool* held_by_another = nullptr);
  void ReleaseNodeLock();
  void set_progress(bool on) { opt_.progress = on; }
  // Writes this process' pid into the lock file (after a fork, the daemon's).
  void WritePid();
  // One scan. Returns true if something is alive or pending (the saver is not idle).
  bool PollOnce();
  // Polls until *stop or the idle timeout. Needs the node lock.
  void Run(const std::atomic<bool>* stop);
  // From any thread while Run() runs on another: wakes the saver and waits until a scan that
  // began after this call ended with no disk write pending, so every disk save asked for and
  // every dead process' newest snapshot is on disk (or failed and was logged). False on
  // timeout, or if Run() is not running.
  bool WaitUntilPersisted(double timeout_s) XT_EXCLUDES(scan_mu_);
  // Removes segments that no longer need to be in memory (see above); returns how many.
  int RemoveFinishedSegments(bool log_kept);

 private:
  void Serve(Segment& seg, bool* busy, bool* pending);
  SaverOptions opt_;
  int lock_fd_ = -1;
  int wake_fd_ = -1;
  bool gone_ = false;
  std::map<std::string, std::unique_ptr<Segment>> segments_;
  std::set<std::string> untrusted_;  // segments not ours, named once (while they are there)
  // Scans ended and whether the last one left a disk write pending, for WaitUntilPersisted.
  Mutex scan_mu_;
  CondVar scan_cv_;
  uint64_t scans_ XT_GUARDED_BY(scan_mu_) = 0;
  bool scanning_ XT_GUARDED_BY(scan_mu_) = false;
  bool last_scan_pending_ XT_GUARDED_BY(scan_mu_) = false;
  bool running_ XT_GUARDED_BY(scan_mu_) = false;
};

// Makes sure a saver runs for shm_dir: if nobody holds the lock, starts `binary --daemon`
// (which detaches: new session, stdin/stdout on /dev/null, stderr kept if it is a terminal,
// else appended to SHM_DIR/xtimer-ckpt-saver.log) and waits for it to take the lock.
Status EnsureSaver(const std::string& binary, const std::string& shm_dir, double idle_exit_s);

}  // namespace xtimer::ckpt
