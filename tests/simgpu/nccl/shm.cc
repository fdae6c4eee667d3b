#include "nccl/shm.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "common/simgpu_env.h"

extern "C" __attribute__((visibility("default"), noinline)) int simnccl_wait_for_peers(std::atomic<uint32_t>* word,
                                                                                       uint32_t seen, int timeout_ms) {
  timespec ts{timeout_ms / 1000, long(timeout_ms % 1000) * 1000000};
  // Not FUTEX_PRIVATE: the word lives in memory shared with the peer processes.
  return int(syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0));
}

namespace simgpu::nccl {
namespace {

constexpr uint64_t kMagic = 0x314c43434e4d4953ULL;  // "SIMNCCL1"
constexpr uint32_t kVersion = 2;

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

uint64_t default_chunk(int nranks) {
  int64_t c = env_int("SIMGPU_NCCL_CHUNK_BYTES", 0);
  if (c <= 0) c = nranks <= 8 ? (1 << 20) : nranks <= 32 ? (256 << 10) : (64 << 10);
  return round_up(uint64_t(c), 64);
}

}  // namespace

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void Segment::ring(int r) const {
  RankSlot* s = rank(r);
  s->doorbell.fetch_add(1, std::memory_order_release);
  futex_wake_all(&s->doorbell);
}

std::unique_ptr<Segment> Segment::attach(const std::string& name, int nranks, int rank, int dev, ncclResult_t* err) {
  *err = ncclSuccess;
  std::unique_ptr<Segment> seg(new Segment);
  seg->name_ = name;
  seg->nranks_ = nranks;
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd >= 0) {
    // Creator: size the file, lay out the header, publish the magic last.
    const uint64_t chunk = default_chunk(nranks);
    const size_t ranks_off = round_up(sizeof(Header), 64);
    const size_t channels_off = round_up(ranks_off + sizeof(RankSlot) * size_t(nranks), 64);
    const size_t data_off = round_up(channels_off + sizeof(Channel) * size_t(nranks) * size_t(nranks), 4096);
    const size_t total = data_off + size_t(nranks) * size_t(nranks) * 2 * chunk;
    if (ftruncate(fd, off_t(total)) != 0) {
      close(fd);
      shm_unlink(name.c_str());
      *err = ncclSystemError;
      return nullptr;
    }
    void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
      shm_unlink(name.c_str());
      *err = ncclSystemError;
      return nullptr;
    }
    seg->base_ = static_cast<char*>(p);
    seg->size_ = total;
    seg->hdr_ = static_cast<Header*>(p);
    Header* h = seg->hdr_;  // the file is zero-filled: atomics start at 0
    h->version = kVersion;
    h->nranks = uint32_t(nranks);
    h->chunk = chunk;
    h->total_size = total;
    h->ranks_off = ranks_off;
    h->channels_off = channels_off;
    h->data_off = data_off;
    h->magic.store(kMagic, std::memory_order_release);
  } else if (errno == EEXIST) {
    fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) {
      *err = ncclSystemError;
      return nullptr;
    }
    // The creator may still be sizing it: wait for the size, then for the magic.
    struct stat st {};
    for (int i = 0; fstat(fd, &st) == 0 && st.st_size == 0; ++i) {
      if (i > 60000) break;  // a minute: the creator died between open and ftruncate
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (st.st_size == 0) {
      close(fd);
      *err = ncclSystemError;
      return nullptr;
    }
    void* p = mmap(nullptr, size_t(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
      *err = ncclSystemError;
      return nullptr;
    }
    seg->base_ = static_cast<char*>(p);
    seg->size_ = size_t(st.st_size);
    seg->hdr_ = static_cast<Header*>(p);
    for (int i = 0; seg->hdr_->magic.load(std::memory_order_acquire) != kMagic; ++i) {
      if (i > 60000) {
        *err = ncclSystemError;
        return nullptr;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (seg->hdr_->nranks != uint32_t(nranks) || seg->hdr_->total_size > seg->size_ || seg->hdr_->version != kVersion) {
      log("nccl: segment %s is for %u ranks, this rank asked for %d", name.c_str(), seg->hdr_->nranks, nranks);
      *err = ncclInvalidUsage;
      return nullptr;
    }
  } else {
    log("nccl: shm_open(%s) failed: %s", name.c_str(), strerror(errno));
    *err = ncclSystemError;
    return nullptr;
  }
  RankSlot* me = seg->rank(rank);
  me->pid = int32_t(getpid());
  me->dev = dev;
  Header* h = seg->hdr_;
  // The last rank to attach removes the name: killed jobs leave nothing in /dev/shm.
  if (h->attached.fetch_add(1, std::memory_order_acq_rel) + 1 == uint32_t(nranks)) seg->unlink();
  h->init_word.fetch_add(1, std::memory_order_release);
  futex_wake_all(&h->init_word);
  return seg;
}

bool Segment::wait_all_attached(const std::atomic<bool>& local_abort) {
  Header* h = hdr_;
  for (;;) {
    const uint32_t seen = h->init_word.load(std::memory_order_acquire);
    if (h->attached.load(std::memory_order_acquire) >= uint32_t(nranks_)) return true;
    if (local_abort.load() || h->aborted.load()) return false;
    simnccl_wait_for_peers(&h->init_word, seen, 100);
  }
}

void Segment::unlink() { shm_unlink(name_.c_str()); }

Segment::~Segment() {
  if (base_) munmap(base_, size_);
}

}  // namespace simgpu::nccl
