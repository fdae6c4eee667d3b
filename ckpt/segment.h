// One rank's in-memory checkpoint: a control page and two slots in XTIMER_CKPT_SHM_DIR
// (a tmpfs), all outliving the training process (docs/formats.md, "Shared-memory segment").
//
//   xtimer-ckpt-<key>-r<rank>.ctl     4096 bytes: which slot is current, locks, disk state
//   xtimer-ckpt-<key>-r<rank>.slot0   an image (image.h) in a file of `capacity` bytes
//   xtimer-ckpt-<key>-r<rank>.slot1
//
// `key` is a hash of the checkpoint folder. A save fills the slot that is not current,
// checksums it while copying, then makes it current with one atomic store: a crash at any
// instant leaves the previous snapshot intact, and a reader never sees a half-written one.
//
// Locks live in the control page and name a process (proc.h): one writer or up to six readers
// per slot (the saver persisting it, a load, inspect). A lock held by a dead process is taken
// over. A slot that holds a step asked for on disk and not yet written is not overwritten: a
// memory save skips (the previous snapshot stays current), a disk save waits.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/copier.h"
#include "ckpt/image.h"
#include "ckpt/status.h"

namespace xtimer::ckpt {

constexpr int kSlotReaders = 6;

// Files of the shared-memory folder (the segments; the saver's lock, wake FIFO and log). That
// folder (/dev/shm) is writable by every user of the node and these names are predictable, so a
// file there is used only when it is this user's own:
//  - one that does not exist is created exclusively (O_CREAT | O_EXCL, never through a link;
//    a FIFO by mkfifo), then given mode 0600 by fchmod whatever the umask;
//  - one that exists is opened with O_NOFOLLOW and O_NONBLOCK (a FIFO never blocks the open)
//    and fstat'ed: it must be of `type` (S_IFREG, or S_IFIFO for the wake FIFO), owned by
//    geteuid() and not writable by group or others.
// Anything else is Status::Untrusted naming the file, what is wrong and what to do; a caller
// names it in one log line and does without it (a load reads the disk). `access` is O_RDONLY,
// O_WRONLY or O_RDWR, optionally | O_APPEND. *created (may be null): this call created it.
Status OpenShmFile(const std::string& path, int access, bool create, unsigned type, int* fd, bool* created = nullptr);

enum class Holder : uint8_t { kNone = 0, kWriter = 1, kPersist = 2, kLoad = 3, kInspect = 4 };
// Per-slot disk state.
enum DiskState : uint32_t { kDiskNone = 0, kDiskWanted = 1, kDiskDone = 2, kDiskFailed = 3 };
// Owner state of the segment.
enum OwnerState : uint32_t { kOwnerNone = 0, kOwnerRunning = 1, kOwnerClosed = 2, kOwnerDied = 3 };

struct SlotCtl {    // 128 bytes; every field is accessed atomically
  uint64_t writer;  // 0 or WithKind(tag, kWriter)
  uint64_t readers[kSlotReaders];
  uint64_t seq;        // odd while being written
  int64_t step;        // step it holds; -1 none
  uint64_t capacity;   // size of the slot file
  uint64_t image_len;  // bytes of the image in it
  uint32_t disk;       // DiskState
  uint32_t pad;
  uint64_t reserved[4];
};
static_assert(sizeof(SlotCtl) == 128);

struct Control {     // 4096 bytes, little-endian
  char magic[8];     // "XTCKSHM1"
  uint32_t version;  // 1
  uint32_t size;     // 4096
  uint32_t rank;
  uint32_t world_size;
  uint32_t keep;         // XTIMER_CKPT_KEEP of the owner
  uint32_t flags;        // bit 0: persist on failure
  uint64_t owner;        // tag of the training process; 0 none
  uint32_t owner_state;  // OwnerState
  uint32_t pad0;
  uint64_t current;        // 0 none, 1 slot0, 2 slot1: the one atomic flip
  int64_t persisted;       // newest step of this rank durable on disk; -1 none
  uint64_t saver;          // tag of the saver that last served this segment
  int64_t progress_step;   // the step being written to disk; -1 none
  uint64_t progress_done;  // bytes of it written so far
  uint64_t progress_total;
  int64_t failed_step;  // newest step whose persist failed; -1 none (see `error`)
  uint64_t reserved0[19];
  SlotCtl slot[2];  // at 256
  uint64_t reserved1[64];
  char ckpt_dir[2048];  // at 1024: the checkpoint folder, NUL-terminated
  char error[1024];     // at 3072: why failed_step failed
};
static_assert(sizeof(Control) == 4096);
static_assert(offsetof(Control, slot) == 256);
static_assert(offsetof(Control, ckpt_dir) == 1024);

constexpr uint32_t kFlagPersistOnFailure = 1;

// One tensor of a save: what the index says about it and where its bytes are.
struct SaveEntry {
  std::string name, dtype, device;
  std::vector<int64_t> shape;
  Source src;
};

struct SaveArgs {
  int64_t step = 0;
  int world_size = 1;
  std::string tree_json;
  std::vector<SaveEntry> entries;
  bool disk = false;  // also wanted on disk: the slot is kept until the saver wrote it
  int threads = 0;    // copy threads (0: automatic)
  // When the target slot is busy (being persisted, or holding a step not yet on disk):
  // false: skip this save (SaveResult::kSkipped); true: wait, calling `while_waiting` about
  // every 50 ms (a non-ok status from it ends the wait with that status).
  bool wait_if_busy = false;
  std::function<Status(const std::string& why)> while_waiting;
};

enum class SaveResult { kSaved, kSkipped };

class Segment;

// A slot pinned for reading. Releases on destruction.
class ReadLease {
 public:
  ReadLease() = default;
  ReadLease(const ReadLease&) = delete;
  ReadLease& operator=(const ReadLease&) = delete;
  ReadLease(ReadLease&& o) noexcept { *this = std::move(o); }
  ReadLease& operator=(ReadLease&& o) noexcept;
  ~ReadLease() { Release(); }
  void Release();
  bool held() const { return seg_ != nullptr; }

  int slot() const { return slot_; }
  const unsigned char* image() const { return image_; }
  const Index& index() const { return index_; }
  const std::string& what() const { return what_; }  // names the slot in messages

 private:
  friend class Segment;
  Segment* seg_ = nullptr;
  int slot_ = -1;
  int word_ = -1;
  const unsigned char* image_ = nullptr;
  Index index_;
  std::string what_;
};

class Segment {
 public:
  // "xtimer-ckpt-<16 hex>-r<rank>": the file prefix for a checkpoint folder and rank.
  static std::string BaseName(const std::string& ckpt_dir, int rank);
  // Opens the segment of (ckpt_dir, rank) in shm_dir, creating the control page if needed.
  static Status Create(const std::string& shm_dir, const std::string& ckpt_dir, int rank,
                       std::unique_ptr<Segment>* out);
  // Opens an existing segment by its .ctl path (saver, inspect). NotFound if it is not there.
  static Status Open(const std::string& ctl_path, bool writable, std::unique_ptr<Segment>* out);
  ~Segment();

  Control* ctl() const { return ctl_; }
  const std::string& ctl_path() const { return ctl_path_; }
  std::string slot_path(int slot) const;
  std::string ckpt_dir() const;
  int rank() const;
  // A short name for messages: "shared-memory checkpoint of rank R (PATH)".
  std::string Describe() const;

  // The training process takes the segment (load or save). Fails if another live process has it.
  Status Claim(uint32_t keep, bool persist_on_failure);
  // Marks a clean end (the owner exits normally): the saver will not persist on failure.
  void CloseClean();
  bool OwnedBySelf() const;

  // Save into the slot that is not current, then make it current.
  Status Save(const SaveArgs& args, SaveResult* result, std::string* skipped_why);

  // Pins the current slot (or a given one) for reading and parses its index.
  Status AcquireCurrent(Holder kind, ReadLease* lease);
  Status AcquireSlot(int slot, Holder kind, ReadLease* lease);

  // Current slot (0/1) or -1; step of a slot.
  int CurrentSlot() const;
  int64_t SlotStep(int slot) const;

  // True if the control file was removed (by the saver, or by hand) since it was opened.
  bool Unlinked() const;
  // Removes the three files; only when no live process owns the segment and no slot is in use.
  Status Remove();

  // Room needed for two slots of `image_len`: exposed for tests and messages.
  static uint64_t CapacityFor(uint64_t image_len);
  // Waits until the other slot is reserved and touched behind the first save (see prefault_);
  // the next save calls it, tests and the destructor too.
  void JoinPrefault();

 private:
  Segment() = default;
  // Maps the slot file at its size; `populate`: with its pages (MAP_POPULATE).
  Status MapSlot(int slot, bool create, bool populate = true);
  // Grows both slots to hold `need` bytes; the target's pages are allocated on `threads` threads.
  Status EnsureCapacity(uint64_t need, int threads);
  void StartPrefault(int slot, uint64_t from, uint64_t cap);
  Status AcquireWrite(int slot, std::string* why);
  void ReleaseWrite(int slot);
  Status AcquireRead(int slot, Holder kind, int* word, std::string* why);
  void ReleaseRead(int slot, int word);
  friend class ReadLease;

  std::string shm_dir_, base_, ctl_path_;
  int ctl_fd_ = -1;
  Control* ctl_ = nullptr;
  bool writable_ = false;
  struct Map {
    int fd = -1;
    unsigned char* base = nullptr;
    uint64_t size = 0;
  } maps_[2];
  // The first save of a size allocates and maps the pages of its own slot only (allocation,
  // zeroing, page tables: a few times a copy's time), in parallel on the copy threads. The other one is left pending_
  // by EnsureCapacity, whose room check covered it, and after the save prefault_ (nice 10) reserves it, records its
  // capacity and touches its pages (MADV_POPULATE_WRITE) in a mapping of its own, which JoinPrefault makes the slot's.
  // The next save joins it before reading capacities (it waits only if the thread is still at work); if the reservation
  // failed (the room went meanwhile), that save reserves the slot itself and names the error before any copy. The
  // thread never writes data into a slot.
  int pending_slot_ = -1;
  uint64_t pending_from_ = 0, pending_cap_ = 0;
  int prefault_slot_ = -1;                  // the thread's slot; -1: none
  unsigned char* prefault_base_ = nullptr;  // the thread's mapping, read after the join
  uint64_t prefault_size_ = 0;
  std::thread prefault_;
  std::atomic<bool> prefault_stop_{false};
};

// The control page's atomics.
template <typename T>
std::atomic_ref<T> A(T& field) {
  return std::atomic_ref<T>(field);
}

}  // namespace xtimer::ckpt
