#include "ckpt/copier.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace xtimer::ckpt {

bool Source::Contiguous() const {
  if (strides.empty()) return true;
  int64_t expect = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && strides[d] != expect) return false;
    expect *= shape[d];
  }
  return true;
}

CopyPool& CopyPool::Get(int threads) {
  static Mutex mu;
  static CopyPool* pool = nullptr;
  static pid_t owner = 0;
  const int automatic = static_cast<int>(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
  if (threads <= 0) threads = automatic;
  MutexLock lock(mu);
  // After fork() the child has none of the parent's threads: make a new pool (the old object is
  // left alone; its threads do not exist here).
  // The pool is never resized (a ParallelFor may be running on it); ask for more threads than
  // it has and you get what it has.
  if (pool == nullptr || owner != getpid()) {
    pool = new CopyPool(std::max(threads, automatic));
    owner = getpid();
  }
  return *pool;
}

CopyPool::CopyPool(int threads) {
  for (int i = 0; i + 1 < threads; ++i) workers_.emplace_back([this, i] { Worker(i); });
}

CopyPool::~CopyPool() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  for (auto& t : workers_) t.join();
}

void CopyPool::Work() {
  for (size_t k = next_.fetch_add(1); k < n_; k = next_.fetch_add(1)) (*fn_)(k);
}

void CopyPool::Worker(int i) {
  uint64_t seen = 0;
  for (;;) {
    MutexLock lock(mu_);
    cv_.Wait(mu_, [&]() XT_REQUIRES(mu_) { return stop_ || (gen_ != seen && i < participants_); });
    if (stop_) return;
    seen = gen_;
    lock.Unlock();
    Work();
    lock.Lock();
    if (--running_ == 0) done_cv_.NotifyAll();
  }
}

void CopyPool::ParallelFor(size_t n, int threads, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  MutexLock call(call_mu_);
  if (threads <= 0) threads = size();  // automatic: every thread of the pool
  int helpers = std::clamp(threads - 1, 0, static_cast<int>(workers_.size()));
  helpers = static_cast<int>(std::min<size_t>(helpers, n - 1));
  {
    MutexLock lock(mu_);
    fn_ = &fn;
    n_ = n;
    next_.store(0);
    participants_ = helpers;
    running_ = helpers;
    ++gen_;
  }
  if (helpers > 0) cv_.NotifyAll();
  Work();
  MutexLock lock(mu_);
  done_cv_.Wait(mu_, [&]() XT_REQUIRES(mu_) { return running_ == 0; });
  participants_ = 0;
}

namespace {

struct Piece {
  size_t entry;
  uint64_t off;  // within the entry
  uint64_t len;
};

// Splits entries into pieces (multiples of 64 bytes but the last of each entry).
std::vector<Piece> Split(const std::vector<uint64_t>& sizes, const std::vector<size_t>& which, bool* any) {
  std::vector<Piece> pieces;
  for (size_t i : which) {
    uint64_t n = sizes[i];
    if (n == 0) {
      pieces.push_back({i, 0, 0});
      continue;
    }
    for (uint64_t off = 0; off < n; off += kCopyPiece) pieces.push_back({i, off, std::min(kCopyPiece, n - off)});
  }
  *any = !pieces.empty();
  return pieces;
}

// Combines piece checksums in order, entry by entry.
void Combine(const std::vector<Piece>& pieces, const std::vector<Fletcher>& parts, std::vector<Fletcher>* out) {
  for (size_t k = 0; k < pieces.size(); ++k) (*out)[pieces[k].entry].Append(parts[k]);
}

void GatherDims(unsigned char*& dst, const unsigned char* src, const Source& s, size_t dim) {
  const size_t e = static_cast<size_t>(s.elem_size);
  const int64_t n = s.shape[dim];
  const int64_t stride = s.strides[dim] * static_cast<int64_t>(e);
  if (dim + 1 == s.shape.size()) {
    if (s.strides[dim] == 1) {
      std::memcpy(dst, src, static_cast<size_t>(n) * e);
      dst += static_cast<size_t>(n) * e;
      return;
    }
    for (int64_t i = 0; i < n; ++i, dst += e) std::memcpy(dst, src + i * stride, e);
    return;
  }
  for (int64_t i = 0; i < n; ++i) GatherDims(dst, src + i * stride, s, dim + 1);
}

}  // namespace

void GatherStrided(void* dst, const Source& s) {
  for (int64_t d : s.shape)
    if (d == 0) return;
  auto* d = static_cast<unsigned char*>(dst);
  if (s.shape.empty()) {
    std::memcpy(d, s.ptr, static_cast<size_t>(s.elem_size));
    return;
  }
  GatherDims(d, static_cast<const unsigned char*>(s.ptr), s, 0);
}

void CopyHostSources(const std::vector<Source>& sources, const std::vector<size_t>& which, unsigned char* base,
                     const std::vector<uint64_t>& offsets, std::vector<Checksum>* sums, int threads) {
  std::vector<uint64_t> sizes(sources.size());
  std::vector<size_t> contiguous, strided;
  for (size_t i : which) {
    sizes[i] = sources[i].nbytes;
    (sources[i].Contiguous() ? contiguous : strided).push_back(i);
  }
  bool any = false;
  std::vector<Piece> pieces = Split(sizes, contiguous, &any);
  // Strided entries are one piece each, after the contiguous ones.
  for (size_t i : strided) pieces.push_back({i, 0, sizes[i]});
  std::vector<Fletcher> parts(pieces.size());
  CopyPool::Get(threads).ParallelFor(pieces.size(), threads, [&](size_t k) {
    const Piece& p = pieces[k];
    const Source& s = sources[p.entry];
    unsigned char* dst = base + offsets[p.entry] + p.off;
    if (s.Contiguous()) {
      parts[k] = CopyWithChecksum(dst, static_cast<const unsigned char*>(s.ptr) + p.off, p.len, /*stream=*/true);
    } else {
      GatherStrided(dst, s);
      parts[k] = ChecksumBytes(dst, p.len);
    }
  });
  std::vector<Fletcher> total(sources.size());
  Combine(pieces, parts, &total);
  for (size_t i : which) (*sums)[i] = total[i].Finish();
}

Fletcher ParallelCopy(void* dst, const void* src, uint64_t len, int threads, bool stream) {
  std::vector<uint64_t> sizes{len};
  bool any = false;
  std::vector<Piece> pieces = Split(sizes, {0}, &any);
  std::vector<Fletcher> parts(pieces.size());
  CopyPool::Get(threads).ParallelFor(pieces.size(), threads, [&](size_t k) {
    const Piece& p = pieces[k];
    parts[k] = CopyWithChecksum(static_cast<unsigned char*>(dst) + p.off,
                                static_cast<const unsigned char*>(src) + p.off, p.len, stream);
  });
  Fletcher f;
  for (const Fletcher& part : parts) f.Append(part);
  return f;
}

int PopulateParallel(unsigned char* base, uint64_t size, int threads) {
  constexpr uint64_t kStep = 64ull << 20;
  const size_t n = static_cast<size_t>((size + kStep - 1) / kStep);
  std::atomic<int> err{0};
  CopyPool::Get(threads).ParallelFor(n, threads, [&](size_t k) {
    const uint64_t off = k * kStep;
    if (err.load(std::memory_order_relaxed) != 0) return;
    int rc;
    do {
      rc = madvise(base + off, std::min(kStep, size - off), MADV_POPULATE_WRITE);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) err.store(errno, std::memory_order_relaxed);
  });
  return err.load();
}

int64_t CopyOutVerified(const std::vector<const void*>& src, const std::vector<void*>& dst,
                        const std::vector<uint64_t>& len, const std::vector<Checksum>& expected, int threads) {
  std::vector<size_t> all(src.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  bool any = false;
  std::vector<Piece> pieces = Split(len, all, &any);
  std::vector<Fletcher> parts(pieces.size());
  CopyPool::Get(threads).ParallelFor(pieces.size(), threads, [&](size_t k) {
    const Piece& p = pieces[k];
    // Regular stores: the caller uses the data next.
    parts[k] = CopyWithChecksum(static_cast<unsigned char*>(dst[p.entry]) + p.off,
                                static_cast<const unsigned char*>(src[p.entry]) + p.off, p.len, p.len >= (1u << 20));
  });
  std::vector<Fletcher> total(src.size());
  Combine(pieces, parts, &total);
  for (size_t i = 0; i < src.size(); ++i)
    if (total[i].Finish() != expected[i]) return static_cast<int64_t>(i);
  return -1;
}

}  // namespace xtimer::ckpt
