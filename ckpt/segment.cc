#include "ckpt/segment.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>
#include <thread>

#include "ckpt/copier.h"
#include "ckpt/cuda_copy.h"
#include "ckpt/proc.h"
#include "common/log.h"
#include "common/regular_file.h"

namespace xtimer::ckpt {
namespace {

constexpr char kCtlMagic[8] = {'X', 'T', 'C', 'K', 'S', 'H', 'M', '1'};
constexpr uint32_t kCtlVersion = 1;

std::string Hex16(uint64_t v) {
  char b[20];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string Bytes(uint64_t n) {
  char b[64];
  if (n >= (1ull << 30))
    std::snprintf(b, sizeof b, "%llu bytes (%.2f GiB)", static_cast<unsigned long long>(n), n / 1073741824.0);
  else std::snprintf(b, sizeof b, "%llu bytes (%.1f MiB)", static_cast<unsigned long long>(n), n / 1048576.0);
  return b;
}

// flock held for the scope.
class FileLock {
 public:
  explicit FileLock(int fd) : fd_(fd) {
    while (flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~FileLock() { flock(fd_, LOCK_UN); }

 private:
  int fd_;
};

void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Faults in [base, base+size) of a shared mapping without changing a byte, in 64 MiB steps so
// that `stop` is seen soon. The first touch of a tmpfs page (allocation, zeroing, page table)
// costs about as much as copying into it.
void Prefault(unsigned char* base, uint64_t size, const std::atomic<bool>& stop) {
  constexpr uint64_t kStep = 64ull << 20;
  long page = sysconf(_SC_PAGESIZE);
  for (uint64_t off = 0; off < size && !stop.load(std::memory_order_relaxed); off += kStep) {
    uint64_t len = std::min(kStep, size - off);
    if (madvise(base + off, len, MADV_POPULATE_WRITE) == 0) continue;
    if (errno != EINVAL) return;  // the mapping went away (EFAULT/ENOMEM): nothing to do
    // Before Linux 5.14: a read of each page faults it in (tmpfs maps it writable).
    for (uint64_t p = 0; p < len; p += static_cast<uint64_t>(page))
      (void)__atomic_load_n(base + off + p, __ATOMIC_RELAXED);
  }
}

// Reserves [0, cap) of a slot file (posix_fallocate in 256 MiB steps, so that `stop` is seen
// soon; zeros written from `from` where fallocate is not supported). 0, or the errno.
int ReserveFile(int fd, uint64_t from, uint64_t cap, const std::atomic<bool>* stop) {
  constexpr uint64_t kStep = 256ull << 20;
  int err = 0;
  for (uint64_t off = 0; off < cap && err == 0; off += kStep) {
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) return ECANCELED;
    err = posix_fallocate(fd, static_cast<off_t>(off), static_cast<off_t>(std::min(kStep, cap - off)));
  }
  if (err == EOPNOTSUPP || err == EINVAL) {
    // Not a tmpfs: write zeros, which fails cleanly as well.
    err = 0;
    static const char zeros[1 << 16] = {};
    for (uint64_t off = from; off < cap && err == 0;) {
      ssize_t n = pwrite(fd, zeros, std::min<uint64_t>(sizeof zeros, cap - off), static_cast<off_t>(off));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) err = n < 0 ? errno : ENOSPC;
      else off += static_cast<uint64_t>(n);
    }
  }
  return err;
}

// True if `dir` is on a memory file system (tmpfs, ramfs, hugetlbfs), where a slot's pages are
// only memory; elsewhere they are a disk file's page cache, written back while saves copy in.
bool OnMemoryFs(const std::string& dir) {
  struct statfs fs;
  if (statfs(dir.c_str(), &fs) != 0) return true;  // cannot tell: say nothing
  constexpr long kTmpfs = 0x01021994, kRamfs = 0x858458f6, kHugetlbfs = 0x958458f6;
  long t = static_cast<long>(fs.f_type);
  return t == kTmpfs || t == kRamfs || t == kHugetlbfs;
}

const char* HolderName(uint8_t kind) {
  switch (static_cast<Holder>(kind)) {
    case Holder::kWriter: return "a save";
    case Holder::kPersist: return "the saver writing it to disk";
    case Holder::kLoad: return "a load";
    case Holder::kInspect: return "xtimer_ckpt inspect";
    default: return "another process";
  }
}

}  // namespace

std::string ErrnoText(int err) { return std::strerror(err); }

namespace {

constexpr const char* kShmAdvice =
    ": not used (another user of the node may have planted it); remove it, or set XTIMER_CKPT_SHM_DIR to a "
    "folder that only you can write to";

// The rule of OpenShmFile for an open descriptor.
Status CheckShmFile(int fd, const std::string& path, unsigned type) {
  struct stat st;
  if (fstat(fd, &st) != 0) return Status::Error("cannot stat " + path + ": " + ErrnoText(errno));
  if ((st.st_mode & S_IFMT) != type)
    return Status::Untrusted(path + " is " + FileTypeName(st.st_mode) + ", not " + FileTypeName(type) + kShmAdvice);
  if (st.st_uid != geteuid())
    return Status::Untrusted(path + " belongs to uid " + std::to_string(st.st_uid) + ", not to this user (uid " +
                             std::to_string(geteuid()) + ")" + kShmAdvice);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::Untrusted(path + " is writable by other users (mode " + mode + ")" + kShmAdvice);
  }
  return Status::Ok();
}

}  // namespace

Status OpenShmFile(const std::string& path, int access, bool create, unsigned type, int* fd_out, bool* created) {
  *fd_out = -1;
  if (created != nullptr) *created = false;
  const int flags = access | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY;
  for (int attempt = 0; attempt < 5; ++attempt) {
    bool made = false;
    int fd = open(path.c_str(), flags);
    if (fd < 0 && errno == ENOENT && create) {
      if (type == S_IFIFO) {
        // mkfifo never follows a link: an existing name, link or not, is EEXIST.
        if (mkfifo(path.c_str(), 0600) == 0) made = true;
        else if (errno != EEXIST) return Status::Error("cannot create " + path + ": " + ErrnoText(errno));
        fd = open(path.c_str(), flags);
      } else {
        fd = open(path.c_str(), flags | O_CREAT | O_EXCL, 0600);
        if (fd < 0 && errno == EEXIST) continue;  // created meanwhile (or a link planted): look again
        made = fd >= 0;
      }
    }
    if (fd < 0) {
      int err = errno;
      if (err == ENOENT) {
        if (made) continue;  // removed between mkfifo and open
        return Status::NotFound(path + " does not exist");
      }
      if (err == ELOOP) return Status::Untrusted(path + " is a symbolic link" + kShmAdvice);
      struct stat ls;
      if ((err == EACCES || err == EPERM) && lstat(path.c_str(), &ls) == 0 && ls.st_uid != geteuid())
        return Status::Untrusted(path + " cannot be opened (" + ErrnoText(err) + "); it belongs to uid " +
                                 std::to_string(ls.st_uid) + kShmAdvice);
      if (err == ENXIO) return Status::NotFound(path + ": no reader");  // a FIFO opened for writing
      return Status::Error("cannot open " + path + ": " + ErrnoText(err));
    }
    // Created here: the mode is set, not left to the umask. Found: checked.
    if (made && fchmod(fd, 0600) != 0) {
      int err = errno;
      close(fd);
      return Status::Error("cannot set the mode of " + path + ": " + ErrnoText(err));
    }
    if (Status st = CheckShmFile(fd, path, type); !st.ok()) {
      close(fd);
      return st;
    }
    *fd_out = fd;
    if (created != nullptr) *created = made;
    return Status::Ok();
  }
  return Status::Error("cannot create " + path + ": it keeps being created and removed");
}

ReadLease& ReadLease::operator=(ReadLease&& o) noexcept {
  if (this != &o) {
    Release();
    seg_ = o.seg_;
    slot_ = o.slot_;
    word_ = o.word_;
    image_ = o.image_;
    index_ = std::move(o.index_);
    what_ = std::move(o.what_);
    o.seg_ = nullptr;
  }
  return *this;
}

void ReadLease::Release() {
  if (seg_ != nullptr) seg_->ReleaseRead(slot_, word_);
  seg_ = nullptr;
  image_ = nullptr;
}

std::string Segment::BaseName(const std::string& ckpt_dir, int rank) {
  return "xtimer-ckpt-" + Hex16(Fnv1a(ckpt_dir)) + "-r" + std::to_string(rank);
}

uint64_t Segment::CapacityFor(uint64_t image_len) {
  // 1/8 headroom so that a state dict that grows a little (optimizer state appearing) does not
  // reallocate; rounded to 2 MiB.
  uint64_t c = image_len + image_len / 8;
  return (c + (2ull << 20) - 1) / (2ull << 20) * (2ull << 20);
}

std::string Segment::slot_path(int slot) const { return shm_dir_ + "/" + base_ + ".slot" + std::to_string(slot); }

std::string Segment::ckpt_dir() const {
  return std::string(ctl_->ckpt_dir, strnlen(ctl_->ckpt_dir, sizeof ctl_->ckpt_dir));
}

int Segment::rank() const { return static_cast<int>(ctl_->rank); }

std::string Segment::Describe() const {
  return "shared-memory checkpoint of rank " + std::to_string(rank()) + " (" + ctl_path_ + ")";
}

Status Segment::Create(const std::string& shm_dir, const std::string& ckpt_dir, int rank,
                       std::unique_ptr<Segment>* out) {
  if (ckpt_dir.size() >= sizeof(Control::ckpt_dir))
    return Status::Error("checkpoint folder path is longer than 2047 bytes: " + ckpt_dir);
  struct stat st;
  if (stat(shm_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return Status::Error("shared-memory folder " + shm_dir +
                         " does not exist; create it or set XTIMER_CKPT_SHM_DIR to a tmpfs folder");
  static std::atomic<bool> warned{false};
  if (!OnMemoryFs(shm_dir) && !warned.exchange(true))
    Log(LogLevel::kWarn,
        "the shared-memory folder %s is not a tmpfs: each save writes a disk file's page cache, which the "
        "kernel writes back to disk while the next saves copy into it (slower saves, disk traffic); set "
        "XTIMER_CKPT_SHM_DIR to a folder in /dev/shm",
        shm_dir.c_str());
  std::unique_ptr<Segment> seg(new Segment);
  seg->shm_dir_ = shm_dir;
  seg->base_ = BaseName(ckpt_dir, rank);
  seg->ctl_path_ = shm_dir + "/" + seg->base_ + ".ctl";
  seg->writable_ = true;
  for (int attempt = 0;; ++attempt) {
    int fd = -1;
    XT_RETURN_IF_ERROR(OpenShmFile(seg->ctl_path_, O_RDWR, /*create=*/true, S_IFREG, &fd));
    FileLock lock(fd);
    // The saver may have removed the files between our open() and flock(): start again.
    if (fstat(fd, &st) != 0 || st.st_nlink == 0) {
      close(fd);
      if (attempt < 5) continue;
      return Status::Error("cannot create " + seg->ctl_path_ + ": it keeps being removed");
    }
    if (st.st_size == 0) {
      if (int err = posix_fallocate(fd, 0, sizeof(Control)); err != 0) {
        close(fd);
        return Status::NoSpace("cannot create " + seg->ctl_path_ + ": " + ErrnoText(err));
      }
    } else if (st.st_size != sizeof(Control)) {
      close(fd);
      return Status::Corrupt(seg->ctl_path_ + " is not an xtimer checkpoint control file (size " +
                             std::to_string(st.st_size) + "); remove it");
    }
    void* p = mmap(nullptr, sizeof(Control), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      close(fd);
      return Status::Error("cannot map " + seg->ctl_path_ + ": " + ErrnoText(err));
    }
    seg->ctl_fd_ = fd;
    seg->ctl_ = static_cast<Control*>(p);
    Control* c = seg->ctl_;
    if (st.st_size == 0) {
      std::memset(c, 0, sizeof *c);
      c->version = kCtlVersion;
      c->size = sizeof(Control);
      c->rank = static_cast<uint32_t>(rank);
      c->world_size = 1;
      c->keep = 3;
      c->persisted = -1;
      c->progress_step = -1;
      c->failed_step = -1;
      for (auto& s : c->slot) s.step = -1;
      std::memcpy(c->ckpt_dir, ckpt_dir.data(), ckpt_dir.size());
      std::memcpy(c->magic, kCtlMagic, 8);  // last: a reader checks it first
    } else if (std::memcmp(c->magic, kCtlMagic, 8) != 0 || c->version != kCtlVersion) {
      return Status::Corrupt(seg->ctl_path_ +
                             " has an unknown format or version; remove it (it holds no usable checkpoint)");
    }
    break;
  }
  *out = std::move(seg);
  return Status::Ok();
}

Status Segment::Open(const std::string& ctl_path, bool writable, std::unique_ptr<Segment>* out) {
  std::unique_ptr<Segment> seg(new Segment);
  size_t slash = ctl_path.rfind('/');
  seg->shm_dir_ = slash == std::string::npos ? "." : ctl_path.substr(0, slash);
  std::string file = slash == std::string::npos ? ctl_path : ctl_path.substr(slash + 1);
  if (file.size() < 5 || file.compare(file.size() - 4, 4, ".ctl") != 0)
    return Status::Error(ctl_path + " is not a checkpoint control file (*.ctl)");
  seg->base_ = file.substr(0, file.size() - 4);
  seg->ctl_path_ = ctl_path;
  seg->writable_ = writable;
  // Only this user's own regular file, never through a link, never waiting on a FIFO.
  int fd = -1;
  XT_RETURN_IF_ERROR(OpenShmFile(ctl_path, O_RDWR, /*create=*/false, S_IFREG, &fd));
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size != sizeof(Control)) {
    close(fd);
    return Status::Corrupt(ctl_path + " is not an xtimer checkpoint control file (wrong size)");
  }
  void* p = mmap(nullptr, sizeof(Control), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    close(fd);
    return Status::Error("cannot map " + ctl_path + ": " + ErrnoText(err));
  }
  seg->ctl_fd_ = fd;
  seg->ctl_ = static_cast<Control*>(p);
  if (std::memcmp(seg->ctl_->magic, kCtlMagic, 8) != 0 || seg->ctl_->version != kCtlVersion ||
      memchr(seg->ctl_->ckpt_dir, 0, sizeof seg->ctl_->ckpt_dir) == nullptr || seg->ctl_->rank > (1u << 24))
    return Status::Corrupt(ctl_path + " has an unknown format or version, or is being created");
  *out = std::move(seg);
  return Status::Ok();
}

Segment::~Segment() {
  prefault_stop_.store(true);
  JoinPrefault();
  for (auto& m : maps_) {
    if (m.base != nullptr) munmap(m.base, m.size);
    if (m.fd >= 0) close(m.fd);
  }
  if (ctl_ != nullptr) munmap(ctl_, sizeof(Control));
  if (ctl_fd_ >= 0) close(ctl_fd_);
}

Status Segment::Claim(uint32_t keep, bool persist_on_failure) {
  FileLock lock(ctl_fd_);
  uint64_t me = SelfTag();
  uint64_t owner = A(ctl_->owner).load();
  if (owner != 0 && TagOnly(owner) != me && A(ctl_->owner_state).load() == kOwnerRunning && TagAlive(owner))
    return Status::Busy(Describe() + " is in use by process " + std::to_string(TagPid(owner)) +
                        " on this node; two processes cannot save the same rank of one checkpoint folder");
  ctl_->keep = keep;
  A(ctl_->flags).store(persist_on_failure ? kFlagPersistOnFailure : 0);
  A(ctl_->owner).store(me);
  A(ctl_->owner_state).store(kOwnerRunning);
  return Status::Ok();
}

bool Segment::OwnedBySelf() const { return TagOnly(A(ctl_->owner).load()) == SelfTag(); }

void Segment::CloseClean() {
  if (OwnedBySelf()) A(ctl_->owner_state).store(kOwnerClosed);
}

int Segment::CurrentSlot() const {
  uint64_t c = A(ctl_->current).load();
  return (c == 1 || c == 2) ? static_cast<int>(c) - 1 : -1;
}

int64_t Segment::SlotStep(int slot) const { return A(ctl_->slot[slot].step).load(); }

void Segment::JoinPrefault() {
  if (prefault_.joinable()) prefault_.join();
  if (prefault_base_ != nullptr) {
    // The thread's mapping becomes the slot's, unless the slot was mapped meanwhile.
    Map& m = maps_[prefault_slot_];
    if (m.base == nullptr) {
      m.base = prefault_base_;
      m.size = prefault_size_;
    } else {
      munmap(prefault_base_, prefault_size_);
    }
  }
  prefault_base_ = nullptr;
  prefault_size_ = 0;
  prefault_slot_ = -1;
}

void Segment::StartPrefault(int slot, uint64_t from, uint64_t cap) {
  JoinPrefault();
  // Its own descriptor: the thread then touches nothing of this object but the stop flag, the
  // slot's capacity (an atomic in the control page) and the two fields read after the join.
  int fd = maps_[slot].fd < 0 ? -1 : fcntl(maps_[slot].fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return;
  prefault_stop_.store(false);
  prefault_slot_ = slot;
  try {
    prefault_ = std::thread([this, fd, slot, from, cap] {
      pthread_setname_np(pthread_self(), "xtimer-prefault");
      // Behind the training loop: nice 10 for this thread only (Linux nice is per thread).
      pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
      (void)setpriority(PRIO_PROCESS, static_cast<id_t>(tid), std::min(19, getpriority(PRIO_PROCESS, 0) + 10));
      if (ReserveFile(fd, from, cap, &prefault_stop_) != 0) {
        // Out of room since the save's check, or stopped: the next save reserves it and names
        // the error before any copy.
        if (ftruncate(fd, static_cast<off_t>(from)) != 0) {
        }
        close(fd);
        return;
      }
      A(ctl_->slot[slot].capacity).store(cap);
      void* p = mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);  // the mapping holds the file
      if (p == MAP_FAILED) return;
      Prefault(static_cast<unsigned char*>(p), cap, prefault_stop_);
      prefault_base_ = static_cast<unsigned char*>(p);  // read after the join
      prefault_size_ = cap;
    });
  } catch (const std::system_error&) {
    close(fd);
    prefault_slot_ = -1;  // no thread: the next save reserves and touches it itself
  }
}

Status Segment::MapSlot(int slot, bool create, bool populate) {
  Map& m = maps_[slot];
  std::string path = slot_path(slot);
  if (m.fd < 0) {
    int fd = -1;
    XT_RETURN_IF_ERROR(OpenShmFile(path, writable_ ? O_RDWR : O_RDONLY, create, S_IFREG, &fd));
    m.fd = fd;
  }
  struct stat st;
  if (fstat(m.fd, &st) != 0) return Status::Error("cannot stat " + path + ": " + ErrnoText(errno));
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (st.st_nlink == 0) {
    // Removed and maybe recreated: reopen.
    if (m.base != nullptr) munmap(m.base, m.size);
    close(m.fd);
    m = Map{};
    return MapSlot(slot, create, populate);
  }
  if (size == m.size && m.base != nullptr) return Status::Ok();
  if (m.base != nullptr) munmap(m.base, m.size);
  m.base = nullptr;
  m.size = 0;
  if (size == 0) return Status::Ok();
  int prot = writable_ ? PROT_READ | PROT_WRITE : PROT_READ;
  void* p = mmap(nullptr, size, prot, MAP_SHARED | (populate ? MAP_POPULATE : 0), m.fd, 0);
  if (p == MAP_FAILED) return Status::Error("cannot map " + path + ": " + ErrnoText(errno));
  m.base = static_cast<unsigned char*>(p);
  m.size = size;
  return Status::Ok();
}

Status Segment::EnsureCapacity(uint64_t need, int threads) {
  JoinPrefault();  // the reservation behind the last save: its capacity is read below
  uint64_t have[2] = {A(ctl_->slot[0].capacity).load(), A(ctl_->slot[1].capacity).load()};
  int target = CurrentSlot() == 0 ? 1 : 0;
  if (have[target] >= need) return Status::Ok();
  uint64_t cap = CapacityFor(need);
  // Both slots grow together: the room check covers two slots, so that the next save cannot
  // run out of room half-way (tmpfs would raise SIGBUS on a write past its space).
  uint64_t inc = 0;
  for (int s = 0; s < 2; ++s) {
    XT_RETURN_IF_ERROR(MapSlot(s, /*create=*/true));
    uint64_t file = maps_[s].size;
    have[s] = std::max(have[s], file);
    if (have[s] < cap) inc += cap - have[s];
  }
  struct statvfs vfs;
  if (statvfs(shm_dir_.c_str(), &vfs) != 0)
    return Status::Error("cannot statvfs " + shm_dir_ + ": " + ErrnoText(errno));
  uint64_t avail = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  std::string advice = "; free space there, enlarge it (docker run --shm-size=..., or mount -o remount,size=... " +
                       shm_dir_ + ") or set XTIMER_CKPT_SHM_DIR to a larger tmpfs";
  if (inc > avail)
    return Status::NoSpace("not enough room for the in-memory checkpoint of rank " + std::to_string(rank()) + ": " +
                           "two slots of " + Bytes(cap) + " need " + Bytes(inc) + " more in " + shm_dir_ + ", " +
                           Bytes(avail) + " available" + advice);
  for (int s = 0; s < 2; ++s) {
    if (have[s] >= cap) continue;
    if (s != target) {
      // Reserved (after the check above covered it) and touched behind this save: the next
      // save, which fills it, finds its capacity, or reserves it itself if that failed.
      pending_slot_ = s;
      pending_from_ = have[s];
      pending_cap_ = cap;
      continue;
    }
    Map& m = maps_[s];
    // Every page is allocated now, on the copy threads: running out of room is an error here,
    // never a SIGBUS during a copy. Before Linux 5.14 (no MADV_POPULATE_WRITE),
    // posix_fallocate reserves the pages and the copy touches them.
    int err = ftruncate(m.fd, static_cast<off_t>(cap)) == 0 ? 0 : errno;
    if (err == 0) {
      Status mapped = MapSlot(s, false, /*populate=*/false);
      if (!mapped.ok()) {
        if (ftruncate(m.fd, static_cast<off_t>(have[s])) != 0) {
        }
        return mapped;
      }
      err = PopulateParallel(m.base, cap, threads);
      if (err == EINVAL) err = ReserveFile(m.fd, have[s], cap, nullptr);
    }
    if (err != 0) {
      if (ftruncate(m.fd, static_cast<off_t>(have[s])) != 0) {
      }
      if (m.base != nullptr && m.size > have[s]) {  // nothing may touch the mapping past the file's end
        munmap(m.base, m.size);
        m.base = nullptr;
        m.size = 0;
      }
      return Status::NoSpace("cannot reserve " + Bytes(cap) + " for " + slot_path(s) + ": " +
                             (err == EFAULT ? std::string("no room left") : ErrnoText(err)) + " (needed " + Bytes(inc) +
                             ", " + Bytes(avail) + " were available)" + advice);
    }
    A(ctl_->slot[s].capacity).store(cap);
  }
  // The target is mapped at its new size; the other one is mapped behind this save (StartPrefault).
  return MapSlot(target, false);
}

Status Segment::AcquireWrite(int slot, std::string* why) {
  SlotCtl& s = ctl_->slot[slot];
  const uint64_t mine = WithKind(SelfTag(), static_cast<uint8_t>(Holder::kWriter));
  uint64_t w = A(s.writer).load();
  if (w != 0) {
    if (TagAlive(w)) {
      *why = "slot " + std::to_string(slot) + " is being written by process " + std::to_string(TagPid(w));
      return Status::Busy(*why);
    }
    // A writer died in the middle of a save: that slot was never made current.
    if (!A(s.writer).compare_exchange_strong(w, mine)) return Status::Busy("slot lock changed");
  } else if (!A(s.writer).compare_exchange_strong(w, mine)) {
    return Status::Busy("slot lock changed");
  }
  for (auto& r : s.readers) {
    uint64_t v = A(r).load();
    if (v == 0) continue;
    if (TagAlive(v)) {
      A(s.writer).store(0);
      *why = "the slot it would overwrite (step " + std::to_string(A(s.step).load()) + ") is held by " +
             HolderName(TagKind(v)) + " (process " + std::to_string(TagPid(v)) + ")";
      return Status::Busy(*why);
    }
    A(r).compare_exchange_strong(v, 0);  // a dead reader
  }
  if (A(s.disk).load() == kDiskWanted) {
    A(s.writer).store(0);
    *why = "the slot it would overwrite holds step " + std::to_string(A(s.step).load()) + ", which is not on disk yet";
    return Status::Busy(*why);
  }
  return Status::Ok();
}

void Segment::ReleaseWrite(int slot) { A(ctl_->slot[slot].writer).store(0); }

Status Segment::AcquireRead(int slot, Holder kind, int* word, std::string* why) {
  SlotCtl& s = ctl_->slot[slot];
  const uint64_t mine = WithKind(SelfTag(), static_cast<uint8_t>(kind));
  int got = -1;
  for (int i = 0; i < kSlotReaders && got < 0; ++i) {
    uint64_t v = A(s.readers[i]).load();
    if (v != 0 && !TagAlive(v)) A(s.readers[i]).compare_exchange_strong(v, 0), v = A(s.readers[i]).load();
    if (v == 0 && A(s.readers[i]).compare_exchange_strong(v, mine)) got = i;
  }
  if (got < 0) {
    *why = "every reader place of slot " + std::to_string(slot) + " is taken";
    return Status::Busy(*why);
  }
  uint64_t w = A(s.writer).load();
  if (w != 0 && TagAlive(w)) {
    A(s.readers[got]).store(0);
    *why = "slot " + std::to_string(slot) + " is being written by process " + std::to_string(TagPid(w));
    return Status::Busy(*why);
  }
  if (A(s.seq).load() & 1) {
    A(s.readers[got]).store(0);
    *why = "slot " + std::to_string(slot) + " holds an incomplete save (its writer died)";
    return Status::NotFound(*why);
  }
  *word = got;
  return Status::Ok();
}

void Segment::ReleaseRead(int slot, int word) {
  if (slot >= 0 && word >= 0) A(ctl_->slot[slot].readers[word]).store(0);
}

Status Segment::AcquireSlot(int slot, Holder kind, ReadLease* lease) {
  lease->Release();
  std::string why;
  int word = -1;
  XT_RETURN_IF_ERROR(AcquireRead(slot, kind, &word, &why));
  ReadLease l;
  l.seg_ = this;
  l.slot_ = slot;
  l.word_ = word;
  l.what_ = Describe() + " slot " + std::to_string(slot);
  if (A(ctl_->slot[slot].step).load() < 0) return Status::NotFound(l.what_ + " is empty");
  XT_RETURN_IF_ERROR(MapSlot(slot, false));
  const Map& m = maps_[slot];
  uint64_t len = A(ctl_->slot[slot].image_len).load();
  if (m.base == nullptr || len > m.size) return Status::Corrupt(l.what_ + ": image longer than the slot file");
  XT_RETURN_IF_ERROR(ParseImage(m.base, len, l.what_, &l.index_));
  if (l.index_.info.step != A(ctl_->slot[slot].step).load())
    return Status::Corrupt(l.what_ + ": step in the image and in the control page differ");
  l.image_ = m.base;
  *lease = std::move(l);
  return Status::Ok();
}

Status Segment::AcquireCurrent(Holder kind, ReadLease* lease) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    int cur = CurrentSlot();
    if (cur < 0) return Status::NotFound(Describe() + " holds no snapshot");
    Status st = AcquireSlot(cur, kind, lease);
    if (st.ok() && CurrentSlot() == cur) return st;
    lease->Release();
    if (st.ok() || st.code() == Status::Code::kBusy) {
      SleepMs(5);  // a save flipped the slot meanwhile, or is writing it: look again
      continue;
    }
    return st;
  }
  return Status::Busy(Describe() + ": the current slot stayed busy");
}

Status Segment::Save(const SaveArgs& args, SaveResult* result, std::string* skipped_why) {
  *result = SaveResult::kSkipped;
  if (args.world_size < 1 || rank() >= args.world_size)
    return Status::Error("rank " + std::to_string(rank()) + " is not below the world size " +
                         std::to_string(args.world_size) + " (check RANK and WORLD_SIZE)");
  // Plan: data offsets, then the index (its size does not depend on the checksums' values).
  std::vector<uint64_t> sizes(args.entries.size()), offsets;
  std::vector<Entry> entries(args.entries.size());
  for (size_t i = 0; i < args.entries.size(); ++i) {
    const SaveEntry& e = args.entries[i];
    sizes[i] = e.src.nbytes;
    entries[i].name = e.name;
    entries[i].dtype = e.dtype;
    entries[i].device = e.device;
    entries[i].shape = e.shape;
    entries[i].nbytes = e.src.nbytes;
  }
  uint64_t index_off = PlanData(sizes, &offsets);
  for (size_t i = 0; i < entries.size(); ++i) entries[i].offset = offsets[i];
  ImageInfo info{args.step, rank(), args.world_size, args.tree_json};
  uint64_t index_estimate = BuildIndex(info, entries).size();
  uint64_t need = index_off + index_estimate + 4096;  // slack for the timestamp's width

  // The slot that is not current.
  int target = CurrentSlot() == 0 ? 1 : 0;
  std::string why;
  for (;;) {
    Status st = AcquireWrite(target, &why);
    if (st.ok()) break;
    if (!args.wait_if_busy) {
      *skipped_why = why;
      return Status::Ok();
    }
    if (args.while_waiting) XT_RETURN_IF_ERROR(args.while_waiting(why));
    SleepMs(50);
    target = CurrentSlot() == 0 ? 1 : 0;
  }
  struct Unlock {
    Segment* s;
    int slot;
    ~Unlock() { s->ReleaseWrite(slot); }
  } unlock{this, target};

  XT_RETURN_IF_ERROR(EnsureCapacity(need, args.threads));
  XT_RETURN_IF_ERROR(MapSlot(target, false));
  Map& m = maps_[target];
  if (m.size < need) return Status::Error(slot_path(target) + " is smaller than its recorded capacity");
  SlotCtl& s = ctl_->slot[target];

  // The slot is now incomplete until the end.
  A(s.seq).store((A(s.seq).load() + 2) | 1);
  A(s.step).store(-1);
  A(s.disk).store(kDiskNone);

  std::vector<Source> sources(args.entries.size());
  std::vector<size_t> host, cuda;
  for (size_t i = 0; i < args.entries.size(); ++i) {
    sources[i] = args.entries[i].src;
    (sources[i].cuda_device >= 0 ? cuda : host).push_back(i);
  }
  std::vector<Checksum> sums(sources.size());
  if (!cuda.empty()) XT_RETURN_IF_ERROR(CopyCudaSources(sources, cuda, m.base, offsets, &sums, args.threads));
  CopyHostSources(sources, host, m.base, offsets, &sums, args.threads);
  for (size_t i = 0; i < entries.size(); ++i) entries[i].sum = sums[i];

  std::string index = BuildIndex(info, entries);
  if (index_off + index.size() > m.size) return Status::Error("internal: index larger than planned");
  std::memcpy(m.base + index_off, index.data(), index.size());
  WriteHeader(m.base, args.step, index_off, index);

  A(s.image_len).store(index_off + index.size());
  A(s.step).store(args.step);
  A(s.disk).store(args.disk ? kDiskWanted : kDiskNone);
  A(ctl_->world_size).store(static_cast<uint32_t>(args.world_size));
  A(s.seq).store(A(s.seq).load() + 1);                        // even: complete
  A(ctl_->current).store(static_cast<uint64_t>(target) + 1);  // the flip
  *result = SaveResult::kSaved;
  if (pending_slot_ >= 0 && pending_slot_ != target) StartPrefault(pending_slot_, pending_from_, pending_cap_);
  pending_slot_ = -1;
  return Status::Ok();
}

bool Segment::Unlinked() const {
  struct stat st;
  return fstat(ctl_fd_, &st) != 0 || st.st_nlink == 0;
}

Status Segment::Remove() {
  FileLock lock(ctl_fd_);
  uint64_t owner = A(ctl_->owner).load();
  if (A(ctl_->owner_state).load() == kOwnerRunning && TagAlive(owner))
    return Status::Busy(Describe() + " is in use by process " + std::to_string(TagPid(owner)));
  for (auto& s : ctl_->slot) {
    uint64_t w = A(s.writer).load();
    if (w != 0 && TagAlive(w)) return Status::Busy(Describe() + " is being written");
    for (auto& r : s.readers) {
      uint64_t v = A(r).load();
      if (v != 0 && TagAlive(v) && TagOnly(v) != SelfTag()) return Status::Busy(Describe() + " is being read");
    }
  }
  for (int s = 0; s < 2; ++s) unlink(slot_path(s).c_str());
  unlink(ctl_path_.c_str());
  return Status::Ok();
}

}  // namespace xtimer::ckpt
