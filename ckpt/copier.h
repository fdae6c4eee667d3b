// Copies tensor bytes into (and out of) a checkpoint image with several threads, computing the
// checksums on the way. Host sources are split into pieces that the threads take in turn; CUDA
// sources go through pinned staging buffers (cuda_copy.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "ckpt/checksum.h"
#include "ckpt/status.h"
#include "common/mutex.h"

namespace xtimer::ckpt {

// One tensor to save. `strides` (in elements) empty or matching a contiguous layout means the
// bytes are contiguous; otherwise they are gathered element by element (any strides >= 0).
struct Source {
  const void* ptr = nullptr;
  uint64_t nbytes = 0;  // bytes of the contiguous result
  int elem_size = 1;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  int cuda_device = -1;  // >= 0: ptr is device memory of that CUDA device
  bool Contiguous() const;
};

// A small pool of copy threads shared by every checkpoint in the process.
class CopyPool {
 public:
  // The process's pool (created on first use with at least min(cores, 8) threads; <= 0 asks for
  // min(cores, 8)). Re-created in a child after fork().
  static CopyPool& Get(int threads);
  ~CopyPool();

  // fn(i) for every i in [0, n), on up to `threads` threads, the caller included (<= 0: all of
  // the pool's).
  void ParallelFor(size_t n, int threads, const std::function<void(size_t)>& fn) XT_EXCLUDES(call_mu_, mu_);
  int size() const { return static_cast<int>(workers_.size()) + 1; }

 private:
  explicit CopyPool(int threads);
  void Worker(int i) XT_EXCLUDES(mu_);
  void Work();

  Mutex call_mu_ XT_ACQUIRED_BEFORE(mu_);  // one ParallelFor at a time
  Mutex mu_;
  CondVar cv_, done_cv_;
  std::vector<std::thread> workers_;
  uint64_t gen_ XT_GUARDED_BY(mu_) = 0;
  int participants_ XT_GUARDED_BY(mu_) = 0;
  int running_ XT_GUARDED_BY(mu_) = 0;
  bool stop_ XT_GUARDED_BY(mu_) = false;
  // The call's work: written under mu_ before gen_ moves on, read by the participants after
  // they saw it move (the mutex orders the two), so read without it.
  const std::function<void(size_t)>* fn_ = nullptr;
  size_t n_ = 0;
  std::atomic<size_t> next_{0};
};

// Bytes per piece that one thread copies at a time.
constexpr uint64_t kCopyPiece = 8ull << 20;

// Copies host sources[i] (cuda_device < 0) to base + offsets[i] and sets (*sums)[i].
void CopyHostSources(const std::vector<Source>& sources, const std::vector<size_t>& which, unsigned char* base,
                     const std::vector<uint64_t>& offsets, std::vector<Checksum>* sums, int threads);

// Copies len bytes src -> dst on up to `threads` threads; returns the checksum.
Fletcher ParallelCopy(void* dst, const void* src, uint64_t len, int threads, bool stream);

// Allocates and maps every page of [base, base+size), a shared file mapping, on up to `threads`
// threads (<= 0: all of the pool's), in 64 MiB pieces. The first touch of a tmpfs page (its
// allocation, zeroing and page table) costs a few times a copy of it; threads do it in parallel,
// where posix_fallocate holds the file's lock. 0, or the errno: EFAULT where a write would raise
// SIGBUS (the file system is full, or the range is past the file's end), EINVAL before Linux 5.14.
int PopulateParallel(unsigned char* base, uint64_t size, int threads);

// Copies each (src_i -> dst_i, len_i) and compares with expected[i]; returns the index of the
// first mismatch or -1. Used by loads: the data reaches the caller only once it verified.
int64_t CopyOutVerified(const std::vector<const void*>& src, const std::vector<void*>& dst,
                        const std::vector<uint64_t>& len, const std::vector<Checksum>& expected, int threads);

// Gathers a strided tensor into contiguous dst.
void GatherStrided(void* dst, const Source& s);

}  // namespace xtimer::ckpt
