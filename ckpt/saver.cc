#include "ckpt/saver.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "ckpt/proc.h"
#include "common/clock.h"
#include "common/log.h"

extern char** environ;

namespace xtimer::ckpt {
namespace {

// "\r" progress on stderr for long writes (a terminal only).
class TermProgress {
 public:
  TermProgress(bool enabled, std::string label) : enabled_(enabled), label_(std::move(label)), start_(MonotonicS()) {}
  ~TermProgress() {
    if (shown_) std::fprintf(stderr, "\n");
  }
  void Update(uint64_t done, uint64_t total) {
    if (!enabled_) return;
    double now = MonotonicS();
    if (now - start_ < 2.0 || now - last_ < 0.5) return;
    last_ = now;
    shown_ = true;
    std::fprintf(stderr, "\rxtimer ckpt: %s %.2f/%.2f GiB (%.0f MB/s)   ", label_.c_str(), done / 1073741824.0,
                 total / 1073741824.0, done / (now - start_) / 1e6);
    std::fflush(stderr);
  }

 private:
  bool enabled_;
  std::string label_;
  double start_, last_ = 0;
  bool shown_ = false;
};

bool EndsWith(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

std::string SaverLockPath(const std::string& shm_dir) { return shm_dir + "/xtimer-ckpt-saver.lock"; }

std::string SaverWakePath(const std::string& shm_dir) { return shm_dir + "/xtimer-ckpt-saver.wake"; }

void WakeSaver(const std::string& shm_dir) {
  // Non-blocking: fails at once (ENXIO) when no saver listens, or if the FIFO is full. Only our
  // own FIFO (a planted one is named by the saver, which then polls).
  int fd = -1;
  if (!OpenShmFile(SaverWakePath(shm_dir), O_WRONLY, /*create=*/false, S_IFIFO, &fd).ok()) return;
  if (write(fd, "w", 1) < 0) {
  }
  close(fd);
}

namespace {

// Ok: the lock file is ours or absent, *running says whether a saver holds it. Untrusted: it is
// not ours (another user's saver, or planted), and no saver of ours can run for this folder.
Status CheckSaverLock(const std::string& shm_dir, bool* running) {
  *running = false;
  int fd = -1;
  Status st = OpenShmFile(SaverLockPath(shm_dir), O_RDONLY, /*create=*/false, S_IFREG, &fd);
  if (st.code() == Status::Code::kNotFound) return Status::Ok();
  XT_RETURN_IF_ERROR(st);
  *running = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);  // drops our shared lock if we took it
  return Status::Ok();
}

}  // namespace

bool SaverRunning(const std::string& shm_dir) {
  bool running = false;
  return CheckSaverLock(shm_dir, &running).ok() && running;
}

Status PersistSlot(Segment& seg, int slot, const ProgressFn& progress, int64_t* step_out) {
  ReadLease lease;
  XT_RETURN_IF_ERROR(seg.AcquireSlot(slot, Holder::kPersist, &lease));
  Control* c = seg.ctl();
  const Index& idx = lease.index();
  const int64_t step = idx.info.step;
  *step_out = step;
  const std::string dir = seg.ckpt_dir();
  const std::string path = RankFile(dir, step, seg.rank());
  RemoveStaleTemps(dir);  // a killed writer's temp file frees its room before this write
  A(c->progress_total).store(idx.image_len);
  A(c->progress_done).store(0);
  A(c->progress_step).store(step);
  Status st = WriteImageFile(lease.image(), idx, path, [&](uint64_t done, uint64_t total) {
    A(c->progress_done).store(done);
    if (progress) progress(done, total);
  });
  A(c->progress_step).store(-1);
  SlotCtl& s = c->slot[slot];
  if (!st.ok()) {
    std::string msg = "step " + std::to_string(step) + " of rank " + std::to_string(seg.rank()) +
                      " was not written to disk: " + st.message();
    size_t n = std::min(msg.size(), sizeof(c->error) - 1);
    std::memcpy(c->error, msg.data(), n);
    c->error[n] = '\0';
    A(c->failed_step).store(step);
    A(s.disk).store(kDiskFailed);
    return st;
  }
  // `latest` and old steps first, then the slot is marked written (still under the lease, so
  // no save can have reused the slot): whoever waits for the disk save sees the tracker moved
  // already when this was the step's last rank.
  bool complete = false;
  Status fin = FinishStep(dir, step, idx.info.world_size, static_cast<int>(c->keep), &complete);
  if (!fin.ok()) Log(LogLevel::kWarn, "after writing %s: %s", path.c_str(), fin.message().c_str());
  int64_t p = A(c->persisted).load();
  while (p < step && !A(c->persisted).compare_exchange_weak(p, step)) {
  }
  A(s.disk).store(kDiskDone);
  return Status::Ok();
}

Saver::Saver(SaverOptions options) : opt_(std::move(options)) {}

Saver::~Saver() {
  ReleaseNodeLock();
  if (wake_fd_ >= 0) close(wake_fd_);
}

bool Saver::AcquireNodeLock(std::string* why, bool* held_by_another) {
  if (held_by_another != nullptr) *held_by_another = false;
  if (lock_fd_ >= 0) return true;
  std::string path = SaverLockPath(opt_.shm_dir);
  int fd = -1;
  // Only our own lock file: another user's (or a link) would let them stop every saver of ours.
  if (Status st = OpenShmFile(path, O_RDWR, /*create=*/true, S_IFREG, &fd); !st.ok()) {
    *why = st.message();
    return false;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    bool held = errno == EWOULDBLOCK;
    *why = held ? "another saver runs for " + opt_.shm_dir : "cannot lock " + path + ": " + ErrnoText(errno);
    if (held_by_another != nullptr) *held_by_another = held;
    close(fd);
    return false;
  }
  lock_fd_ = fd;
  WritePid();
  return true;
}

void Saver::WritePid() {
  // For people (and tests) who want to stop it; the lock, not this pid, decides who the saver is.
  if (lock_fd_ < 0) return;
  std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(lock_fd_, 0) == 0 && pwrite(lock_fd_, pid.data(), pid.size(), 0) < 0) {
  }
}

void Saver::ReleaseNodeLock() {
  if (lock_fd_ < 0) return;
  flock(lock_fd_, LOCK_UN);
  close(lock_fd_);
  lock_fd_ = -1;
}

void Saver::Serve(Segment& seg, bool* busy, bool* pending) {
  Control* c = seg.ctl();
  A(c->saver).store(SelfTag());
  auto persist = [&](int slot, const char* why) {
    int64_t step = A(c->slot[slot].step).load();
    TermProgress term(opt_.progress, "rank " + std::to_string(seg.rank()) + " step " + std::to_string(step));
    double t0 = MonotonicS();
    int64_t written = -1;
    Status st = PersistSlot(
        seg, slot, [&](uint64_t d, uint64_t t) { term.Update(d, t); }, &written);
    if (st.ok())
      Log(LogLevel::kInfo, "wrote step %lld of rank %d to %s (%s, %.2f s)", static_cast<long long>(written), seg.rank(),
          RankFile(seg.ckpt_dir(), written, seg.rank()).c_str(), why, MonotonicS() - t0);
    else if (st.code() != Status::Code::kBusy) Log(LogLevel::kError, "%s", st.message().c_str());
  };

  // 1. Disk saves, oldest step first.
  int order[2] = {0, 1};
  if (A(c->slot[1].step).load() < A(c->slot[0].step).load()) std::swap(order[0], order[1]);
  for (int slot : order) {
    SlotCtl& s = c->slot[slot];
    if (A(s.disk).load() == kDiskWanted && (A(s.seq).load() & 1) == 0 && A(s.step).load() >= 0) {
      persist(slot, "disk save");
    }
    if (A(s.disk).load() == kDiskWanted) *busy = *pending = true;  // still pending (busy slot): try again
  }

  // 2. The training process died without closing: write what is newer than the disk.
  uint64_t owner = A(c->owner).load();
  uint32_t state = A(c->owner_state).load();
  if (state == kOwnerRunning) {
    if (TagAlive(owner)) {
      *busy = true;
    } else if (A(c->owner_state).compare_exchange_strong(state, kOwnerDied)) {
      bool on = (A(c->flags).load() & kFlagPersistOnFailure) != 0;
      Log(LogLevel::kInfo, "training process %d (rank %d of %s) ended without closing its checkpoint%s",
          static_cast<int>(TagPid(owner)), seg.rank(), seg.ckpt_dir().c_str(),
          on ? "; writing its newest snapshots to disk" : "");
      if (on) {
        int cur = seg.CurrentSlot();
        for (int slot : {cur, cur < 0 ? -1 : 1 - cur}) {
          if (slot < 0) continue;
          SlotCtl& s = c->slot[slot];
          int64_t step = A(s.step).load();
          if (step >= 0 && step > A(c->persisted).load() && (A(s.seq).load() & 1) == 0 && A(s.disk).load() != kDiskDone)
            persist(slot, "its process died");
        }
      }
    }
  }
}

bool Saver::PollOnce() {
  {
    MutexLock lock(scan_mu_);
    scanning_ = true;
  }
  std::vector<std::string> found;
  DIR* d = opendir(opt_.shm_dir.c_str());
  if (d == nullptr) {
    gone_ = errno == ENOENT;  // the folder was removed: nothing can ever need us again
    if (gone_) segments_.clear();
    MutexLock lock(scan_mu_);
    scanning_ = false;
    return false;
  }
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind("xtimer-ckpt-", 0) == 0 && EndsWith(name, ".ctl")) found.push_back(opt_.shm_dir + "/" + name);
  }
  closedir(d);
  // Forget segments whose files are gone.
  for (auto it = segments_.begin(); it != segments_.end();)
    it = std::find(found.begin(), found.end(), it->first) == found.end() ? segments_.erase(it) : std::next(it);
  for (auto it = untrusted_.begin(); it != untrusted_.end();)
    it = std::find(found.begin(), found.end(), *it) == found.end() ? untrusted_.erase(it) : std::next(it);
  bool busy = false, pending = false;
  for (const std::string& path : found) {
    auto it = segments_.find(path);
    if (it == segments_.end()) {
      std::unique_ptr<Segment> seg;
      Status st = Segment::Open(path, /*writable=*/false, &seg);
      if (st.code() == Status::Code::kUntrusted) {
        // Not ours (another user's, a link, writable by others): named once, never served.
        if (untrusted_.insert(path).second) Log(LogLevel::kWarn, "saver: %s", st.message().c_str());
        continue;
      }
      if (!st.ok()) continue;  // being created
      it = segments_.emplace(path, std::move(seg)).first;
    }
    Serve(*it->second, &busy, &pending);
  }
  {
    MutexLock lock(scan_mu_);
    ++scans_;
    scanning_ = false;
    last_scan_pending_ = pending;
  }
  scan_cv_.NotifyAll();
  return busy;
}

int Saver::RemoveFinishedSegments(bool log_kept) {
  int removed = 0;
  for (auto it = segments_.begin(); it != segments_.end();) {
    Segment& seg = *it->second;
    Control* c = seg.ctl();
    uint32_t state = A(c->owner_state).load();
    int cur = seg.CurrentSlot();
    int64_t step = cur < 0 ? -1 : A(c->slot[cur].step).load();
    bool pending = A(c->slot[0].disk).load() == kDiskWanted || A(c->slot[1].disk).load() == kDiskWanted;
    bool owner_live = state == kOwnerRunning && TagAlive(A(c->owner).load());
    bool on_disk = step <= A(c->persisted).load();
    if (!owner_live && !pending && (state == kOwnerClosed || on_disk)) {
      if (seg.Remove().ok()) {
        ++removed;
        it = segments_.erase(it);
        continue;
      }
    } else if (!owner_live && !pending && log_kept) {
      Log(LogLevel::kWarn,
          "keeping %s: it holds step %lld, which is not on disk (remove it with xtimer_ckpt clean --all once it is "
          "not needed)",
          seg.ctl_path().c_str(), static_cast<long long>(step));
    }
    ++it;
  }
  return removed;
}

void Saver::Run(const std::atomic<bool>* stop) {
  double idle_since = MonotonicS();
  if (wake_fd_ < 0) {
    // Read-write, so that the FIFO never reports end-of-file when no writer has it open. Not
    // ours (planted): named, and the saver polls every poll_ms instead.
    Status st = OpenShmFile(SaverWakePath(opt_.shm_dir), O_RDWR, /*create=*/true, S_IFIFO, &wake_fd_);
    if (!st.ok())
      Log(st.code() == Status::Code::kUntrusted ? LogLevel::kWarn : LogLevel::kDebug, "saver: %s",
          st.message().c_str());
  }
  WritePid();
  {
    MutexLock lock(scan_mu_);
    running_ = true;
  }
  struct NotRunning {
    Saver* s;
    ~NotRunning() {
      {
        MutexLock lock(s->scan_mu_);
        s->running_ = false;
      }
      s->scan_cv_.NotifyAll();
    }
  } not_running{this};
  while (stop == nullptr || !stop->load()) {
    bool busy = PollOnce();
    if (gone_ && segments_.empty()) {
      Log(LogLevel::kInfo, "saver for %s: the folder is gone, exiting", opt_.shm_dir.c_str());
      return;
    }
    double now = MonotonicS();
    if (busy) idle_since = now;
    if (opt_.idle_exit_s >= 0 && now - idle_since >= opt_.idle_exit_s) {
      RemoveFinishedSegments(/*log_kept=*/true);
      ReleaseNodeLock();
      // A training process that registered just now saw the lock held and started no saver:
      // look once more after letting go.
      if (!PollOnce()) {
        Log(LogLevel::kInfo, "saver for %s: idle for %.0f s, exiting", opt_.shm_dir.c_str(), opt_.idle_exit_s);
        return;
      }
      std::string why;
      if (!AcquireNodeLock(&why)) return;  // another saver took over
      idle_since = MonotonicS();
    }
    if (wake_fd_ >= 0) {
      pollfd p{wake_fd_, POLLIN, 0};
      if (poll(&p, 1, opt_.poll_ms) > 0) {
        char buf[256];
        while (read(wake_fd_, buf, sizeof buf) > 0) {
        }
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(opt_.poll_ms));
    }
  }
}

bool Saver::WaitUntilPersisted(double timeout_s) {
  MutexLock lock(scan_mu_);
  if (!running_) return false;
  // A scan in progress may have begun before the caller's event: then wait for the one after it.
  uint64_t until = scans_ + (scanning_ ? 2 : 1);
  lock.Unlock();
  WakeSaver(opt_.shm_dir);
  lock.Lock();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  // A scan that leaves work pending is followed by another within poll_ms.
  return scan_cv_.WaitUntil(scan_mu_, deadline, [&]() XT_REQUIRES(scan_mu_) {
    return !running_ || (scans_ >= until && !last_scan_pending_);
  }) && running_;
}

Status EnsureSaver(const std::string& binary, const std::string& shm_dir, double idle_exit_s) {
  bool running = false;
  if (Status st = CheckSaverLock(shm_dir, &running); !st.ok())
    return Status::Error("no saver can run for " + shm_dir + ": " + st.message() +
                         "; disk saves are written by the training process itself");
  if (running) return Status::Ok();
  if (binary.empty() || access(binary.c_str(), X_OK) != 0)
    return Status::NotFound("the saver program " + (binary.empty() ? std::string("xtimer_ckpt_saver") : binary) +
                            " was not found; disk saves are written by the training process itself");
  std::string idle = std::to_string(idle_exit_s);
  std::vector<std::string> args = {binary, "--daemon", "--shm-dir", shm_dir, "--idle-exit", idle};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, binary.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return Status::Error("cannot start " + binary + ": " + ErrnoText(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return Status::Error(binary + " --daemon failed (exit status " + std::to_string(status) + ")");
  return Status::Ok();
}

}  // namespace xtimer::ckpt
