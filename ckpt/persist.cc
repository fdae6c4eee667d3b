#include "ckpt/persist.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <thread>
#include <nlohmann/json.hpp>

#include "ckpt/copier.h"
#include "common/atomic_file.h"
#include "common/log.h"
#include "common/regular_file.h"

namespace xtimer::ckpt {
namespace {

constexpr uint64_t kWriteChunk = 16ull << 20;
constexpr uint64_t kSyncWindow = 64ull << 20;

bool AllDigits(const char* s) {
  if (*s == '\0' || std::strlen(s) > 18) return false;
  for (; *s; ++s)
    if (*s < '0' || *s > '9') return false;
  return true;
}

// "rank_<n>.xtc" -> n, else -1.
int RankOfFile(const char* name) {
  if (std::strncmp(name, "rank_", 5) != 0) return -1;
  const char* p = name + 5;
  int r = 0, digits = 0;
  for (; *p >= '0' && *p <= '9' && digits < 9; ++p, ++digits) r = r * 10 + (*p - '0');
  if (digits == 0 || std::strcmp(p, ".xtc") != 0) return -1;
  return r;
}

bool IsTempOf(const char* name) {
  return std::strncmp(name, "rank_", 5) == 0 && std::strstr(name, ".xtc.tmp.") != nullptr;
}

std::string Parent(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// `*err`: the errno of a failed write.
Status PwriteAll(int fd, const unsigned char* p, uint64_t n, uint64_t off, const std::string& path, int* err) {
  while (n > 0) {
    ssize_t w = pwrite(fd, p, std::min<uint64_t>(n, 1ull << 30), static_cast<off_t>(off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      *err = w < 0 ? errno : ENOSPC;
      return Status::Error("cannot write " + path + ": " + ErrnoText(*err));
    }
    p += w;
    off += static_cast<uint64_t>(w);
    n -= static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

// Alignment of the buffer, offsets and lengths of an O_DIRECT write: a page covers every logical
// block size in use.
constexpr uint64_t kDirectAlign = 4096;

Status PreadAll(int fd, void* dst, uint64_t n, uint64_t off, const std::string& path) {
  auto* p = static_cast<unsigned char*>(dst);
  while (n > 0) {
    ssize_t r = pread(fd, p, std::min<uint64_t>(n, 1ull << 30), static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::Error("cannot read " + path + ": " + ErrnoText(errno));
    if (r == 0) return Status::Corrupt(path + ": truncated");
    p += r;
    n -= static_cast<uint64_t>(r);
    off += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

// Checksums of the parts of entries that overlap [pos, pos + n) of the image.
void ChecksumRange(const unsigned char* image, const Index& index, uint64_t pos, uint64_t n, size_t* next,
                   std::vector<Fletcher>* sums) {
  const uint64_t end = pos + n;
  for (size_t i = *next; i < index.entries.size(); ++i) {
    const Entry& e = index.entries[i];
    if (e.offset >= end) break;
    uint64_t lo = std::max(pos, e.offset), hi = std::min(end, e.offset + e.nbytes);
    if (hi > lo) (*sums)[i].Append(ChecksumBytes(image + lo, hi - lo));
    if (e.offset + e.nbytes <= end) *next = i + 1;
  }
}

Status RemoveStep(const std::string& ckpt_dir, int64_t step) {
  std::string dir = StepDir(ckpt_dir, step);
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return Status::Ok();
  bool others = false;
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    if (RankOfFile(e->d_name) >= 0 || IsTempOf(e->d_name)) unlink((dir + "/" + e->d_name).c_str());
    else others = true;
  }
  closedir(d);
  if (others) {
    Log(LogLevel::kWarn, "kept %s: it holds files that are not xtimer checkpoint files", dir.c_str());
    return Status::Ok();
  }
  if (rmdir(dir.c_str()) != 0 && errno != ENOENT)
    Log(LogLevel::kWarn, "cannot remove %s: %s", dir.c_str(), strerror(errno));
  return Status::Ok();
}

// A temp file whose writer is gone: nobody holds its lock (WriteImageFile holds it while
// writing) and it has not changed for a while (a writer between its open and its lock, or a
// file system without flock, is not mistaken for a dead one).
bool StaleTemp(const std::string& path) {
  constexpr time_t kQuietSeconds = 60;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) return false;
  struct stat st;
  bool stale = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_mtime + kQuietSeconds < time(nullptr);
  if (stale && flock(fd, LOCK_EX | LOCK_NB) != 0) stale = errno != EWOULDBLOCK;  // ENOLCK etc: the age decides
  close(fd);  // drops the lock, if taken; the unlink follows
  return stale;
}

// The names in dir that match; none when it cannot be listed.
std::vector<std::string> NamesIn(const std::string& dir, bool (*match)(const char* name)) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d))
    if (match(e->d_name)) names.push_back(e->d_name);
  closedir(d);
  return names;
}

bool IsLatestTemp(const char* name) { return std::strncmp(name, "latest.tmp.", 11) == 0; }

// `latest` is written (WriteFileAtomically: latest.tmp.<pid>, then rename) only under the folder's
// lock, so a temp file of it found while holding that lock was left by a writer killed mid-write.
void RemoveDeadLatestTemps(const std::string& ckpt_dir) {
  for (const std::string& name : NamesIn(ckpt_dir, IsLatestTemp)) {
    std::string path = ckpt_dir + "/" + name;
    struct stat st;
    if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || unlink(path.c_str()) != 0) continue;
    Log(LogLevel::kInfo, "removed %s: a temp file its writer left behind (killed mid-write)", path.c_str());
  }
}

// The entries cut into pieces of at most kCopyPiece bytes, for the copy pool.
struct Piece {
  size_t entry;
  uint64_t off, len;
};

std::vector<Piece> SplitIntoPieces(const std::vector<Entry>& entries) {
  std::vector<Piece> pieces;
  for (size_t i = 0; i < entries.size(); ++i)
    for (uint64_t off = 0; off < entries[i].nbytes; off += kCopyPiece)
      pieces.push_back({i, off, std::min(kCopyPiece, entries[i].nbytes - off)});
  return pieces;
}

// Each entry's checksum from its pieces' (parts[k] is pieces[k]'s); Corrupt naming the first
// entry that does not match.
Status CheckPieceSums(const std::vector<Entry>& entries, const std::vector<Piece>& pieces,
                      const std::vector<Fletcher>& parts, const std::string& path) {
  std::vector<Fletcher> sums(entries.size());
  for (size_t k = 0; k < pieces.size(); ++k) sums[pieces[k].entry].Append(parts[k]);
  for (size_t i = 0; i < entries.size(); ++i)
    if (sums[i].Finish() != entries[i].sum)
      return Status::Corrupt(path + ": checksum mismatch in entry " + entries[i].name +
                             " (the file is corrupt; it was not loaded)");
  return Status::Ok();
}

}  // namespace

std::string StepDir(const std::string& ckpt_dir, int64_t step) { return ckpt_dir + "/" + std::to_string(step); }

std::string RankFile(const std::string& ckpt_dir, int64_t step, int rank) {
  return StepDir(ckpt_dir, step) + "/rank_" + std::to_string(rank) + ".xtc";
}

Status SyncDir(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::Error("cannot open folder " + dir + ": " + ErrnoText(errno));
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  if (rc != 0 && err != EINVAL) return Status::Error("cannot fsync folder " + dir + ": " + ErrnoText(err));
  return Status::Ok();
}

Status WriteImageFile(const unsigned char* image, const Index& index, const std::string& path,
                      const ProgressFn& progress) {
  const std::string dir = Parent(path);
  struct stat st;
  const bool dir_is_new = stat(dir.c_str(), &st) != 0;
  std::string err;
  if (!MakeDirs(dir, &err)) return Status::Error(err);
  static std::atomic<uint64_t> serial{0};
  const std::string tmp = path + ".tmp." + std::to_string(getpid()) + "-" + std::to_string(serial.fetch_add(1));
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Error("cannot create " + tmp + ": " + ErrnoText(errno));
  // Held until the file is renamed or removed: RemoveStaleTemps tells a live writer's temp file
  // from one a killed writer left behind by this lock.
  flock(fd, LOCK_EX | LOCK_NB);
  auto fail = [&](Status s) {
    close(fd);
    unlink(tmp.c_str());
    return s;
  };
  const uint64_t len = index.image_len;
  // Reserve the blocks first: a full disk is reported before anything is written.
  if (int rc = posix_fallocate(fd, 0, static_cast<off_t>(len)); rc == ENOSPC || rc == EDQUOT || rc == EFBIG)
    return fail(Status::NoSpace("no room for " + std::to_string(len) + " bytes in " + dir + ": " + ErrnoText(rc)));

  // The checksums are verified on another thread while this one writes (the slot cannot change
  // under the caller's lease); the file is renamed into place only if they all match.
  std::vector<Fletcher> sums(index.entries.size());
  std::thread verifier([&] {
    size_t next = 0;
    for (uint64_t pos = 0; pos < len; pos += kWriteChunk)
      ChecksumRange(image, index, pos, std::min(kWriteChunk, len - pos), &next, &sums);
  });
  // Whole pages go around the page cache (O_DIRECT) where the file system takes it: a checkpoint
  // is read back rarely, and filling page cache costs a copy and memory (on a VM it can cost
  // more than the disk: docs/benchmarks.md, "on disk and durable"). The tail, and everything
  // after a refusal (EINVAL: no O_DIRECT there), is written through the page cache.
  int direct =
      reinterpret_cast<uintptr_t>(image) % kDirectAlign == 0 ? open(tmp.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC) : -1;
  Status written;
  uint64_t synced = 0;
  for (uint64_t pos = 0; pos < len && written.ok(); pos += kWriteChunk) {
    uint64_t n = std::min(kWriteChunk, len - pos);
    int err = 0;
    if (direct >= 0 && n % kDirectAlign == 0) {
      written = PwriteAll(direct, image + pos, n, pos, tmp, &err);
      if (!written.ok() && err == EINVAL) {
        close(direct);
        direct = -1;
        written = Status::Ok();
      }
    }
    if (direct < 0 || n % kDirectAlign != 0) written = PwriteAll(fd, image + pos, n, pos, tmp, &err);
    if (!written.ok()) break;
    // Start writeback of each finished window and wait for the one before it: the disk streams
    // while we write, and dirty pages stay bounded.
    uint64_t done = pos + n;
    if (done - synced >= kSyncWindow || done == len) {
      sync_file_range(fd, static_cast<off_t>(synced), static_cast<off_t>(done - synced), SYNC_FILE_RANGE_WRITE);
      if (synced >= kSyncWindow)
        sync_file_range(fd, static_cast<off_t>(synced - kSyncWindow), static_cast<off_t>(kSyncWindow),
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
      synced = done;
    }
    if (progress) progress(done, len);
  }
  if (direct >= 0) close(direct);
  verifier.join();
  if (!written.ok()) return fail(written);
  for (size_t i = 0; i < index.entries.size(); ++i)
    if (sums[i].Finish() != index.entries[i].sum)
      return fail(Status::Corrupt("the in-memory snapshot is corrupt (entry " + index.entries[i].name +
                                  "): not written to " + path));
  if (fdatasync(fd) != 0) return fail(Status::Error("cannot fsync " + tmp + ": " + ErrnoText(errno)));
  if (close(fd) != 0) {
    unlink(tmp.c_str());
    return Status::Error("cannot close " + tmp + ": " + ErrnoText(errno));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    unlink(tmp.c_str());
    return Status::Error("cannot rename " + tmp + " to " + path + ": " + ErrnoText(e));
  }
  XT_RETURN_IF_ERROR(SyncDir(dir));
  if (dir_is_new) XT_RETURN_IF_ERROR(SyncDir(Parent(dir)));
  return Status::Ok();
}

int64_t ReadLatest(const std::string& ckpt_dir, std::string* note, int* world_size) {
  std::string path = ckpt_dir + "/latest";
  std::string text, why;
  if (!ReadRegularFile(path, FileRule{.what = "latest file", .max_bytes = 4096}, &text, &why)) {
    if (note) *note = why == "does not exist" ? "" : path + " " + why;
    return -1;
  }
  if (text.empty()) {
    if (note) *note = path + " is empty";
    return -1;
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != "xtimer-ckpt-latest" || !j.contains("step") ||
      !j["step"].is_number_integer()) {
    if (note) *note = path + " is not an xtimer-ckpt-latest file";
    return -1;
  }
  if (world_size != nullptr)
    *world_size = j.contains("world_size") && j["world_size"].is_number_integer() ? j["world_size"].get<int>() : 0;
  return j["step"].get<int64_t>();
}

Status ScanDisk(const std::string& ckpt_dir, std::vector<DiskStep>* steps) {
  steps->clear();
  DIR* d = opendir(ckpt_dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return Status::Ok();
    return Status::Error("cannot list " + ckpt_dir + ": " + ErrnoText(errno));
  }
  while (dirent* e = readdir(d))
    if (AllDigits(e->d_name)) steps->push_back(DiskStep{std::strtoll(e->d_name, nullptr, 10), 0, {}, false, {}});
  closedir(d);
  int latest_world = 0;
  const int64_t latest = ReadLatest(ckpt_dir, nullptr, &latest_world);
  for (DiskStep& s : *steps) {
    std::string dir = StepDir(ckpt_dir, s.step);
    DIR* sd = opendir(dir.c_str());
    if (sd == nullptr) continue;
    while (dirent* e = readdir(sd)) {
      int r = RankOfFile(e->d_name);
      if (r >= 0) s.ranks.push_back(r);
    }
    closedir(sd);
    std::sort(s.ranks.begin(), s.ranks.end());
    for (int r : s.ranks) {  // world size from the first readable file
      XtcFile f;
      Status st = XtcFile::Open(RankFile(ckpt_dir, s.step, r), &f);
      if (st.ok()) {
        s.world_size = f.index().info.world_size;
        break;
      }
      if (s.problem.empty()) s.problem = st.message();
    }
    if (s.world_size > 0) s.problem.clear();
    if (s.world_size > 0 && s.step == latest && latest_world > 0 && s.world_size != latest_world)
      s.problem = ckpt_dir + "/latest says step " + std::to_string(s.step) + " has world size " +
                  std::to_string(latest_world) + ", its files say " + std::to_string(s.world_size) +
                  " (files of another run copied in?)";
    if (s.world_size > 0) {
      s.complete = true;
      for (int r = 0; r < s.world_size && s.complete; ++r)
        s.complete = std::binary_search(s.ranks.begin(), s.ranks.end(), r);
    }
  }
  std::sort(steps->begin(), steps->end(), [](const DiskStep& a, const DiskStep& b) { return a.step > b.step; });
  return Status::Ok();
}

int RemoveStaleTemps(const std::string& ckpt_dir) {
  int removed = 0;
  for (const std::string& step : NamesIn(ckpt_dir, AllDigits)) {
    std::string dir = ckpt_dir + "/" + step;
    for (const std::string& name : NamesIn(dir, IsTempOf)) {
      std::string path = dir + "/" + name;
      if (!StaleTemp(path) || unlink(path.c_str()) != 0) continue;
      Log(LogLevel::kInfo, "removed %s: a temp file its writer left behind (killed mid-write)", path.c_str());
      ++removed;
    }
  }
  return removed;
}

Status FinishStep(const std::string& ckpt_dir, int64_t step, int world_size, int keep, bool* complete) {
  *complete = false;
  for (int r = 0; r < world_size; ++r) {
    struct stat st;
    if (stat(RankFile(ckpt_dir, step, r).c_str(), &st) != 0) return Status::Ok();
  }
  *complete = true;
  // One node at a time moves `latest` and deletes old steps.
  std::string lock_path = ckpt_dir + "/.xtimer-ckpt.lock";
  int lfd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lfd < 0) return Status::Error("cannot create " + lock_path + ": " + ErrnoText(errno));
  while (flock(lfd, LOCK_EX) != 0 && errno == EINTR) {
  }
  struct Closer {
    int fd;
    ~Closer() {
      flock(fd, LOCK_UN);
      close(fd);
    }
  } closer{lfd};
  RemoveDeadLatestTemps(ckpt_dir);
  int64_t latest = ReadLatest(ckpt_dir, nullptr);
  if (step > latest) {
    nlohmann::json j = {{"format", "xtimer-ckpt-latest"},
                        {"version", 1},
                        {"step", step},
                        {"world_size", world_size},
                        {"path", std::to_string(step)}};
    std::string err;
    if (!WriteFileAtomically(ckpt_dir + "/latest", j.dump() + "\n", &err)) return Status::Error(err);
    XT_RETURN_IF_ERROR(SyncDir(ckpt_dir));
    latest = step;
  }
  if (keep <= 0) return Status::Ok();
  std::vector<DiskStep> steps;
  XT_RETURN_IF_ERROR(ScanDisk(ckpt_dir, &steps));
  int kept = 0;
  int64_t oldest_kept = -1;
  for (const DiskStep& s : steps) {
    if (s.complete && s.step <= latest && kept < keep) {
      ++kept;
      oldest_kept = s.step;
    }
  }
  if (kept < keep) return Status::Ok();
  for (const DiskStep& s : steps)
    if (s.step < oldest_kept) RemoveStep(ckpt_dir, s.step);
  return Status::Ok();
}

XtcFile& XtcFile::operator=(XtcFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    size_ = o.size_;
    path_ = std::move(o.path_);
    index_ = std::move(o.index_);
    o.fd_ = -1;
  }
  return *this;
}

XtcFile::~XtcFile() {
  if (fd_ >= 0) close(fd_);
}

Status XtcFile::Open(const std::string& path, XtcFile* out) {
  XtcFile f;
  f.path_ = path;
  // A FIFO or a device in a checkpoint folder is refused at once (common/regular_file.h); the
  // size needs no cap: only the header and the index are read here, and the header must match
  // the file's size.
  std::string why;
  uint64_t size = 0;
  f.fd_ = OpenRegularFile(path, FileRule{.what = "checkpoint file"}, &size, &why);
  if (f.fd_ < 0) {
    if (why == "does not exist") return Status::NotFound(path + " does not exist");
    return Status::Error(path + " " + why);
  }
  f.size_ = size;
  ImageHeader h{};
  unsigned char head[kHeaderLen] = {};
  if (size >= kHeaderLen) XT_RETURN_IF_ERROR(PreadAll(f.fd_, head, kHeaderLen, 0, path));
  XT_RETURN_IF_ERROR(ParseHeader(head, size, path, &h));
  if (h.index_len > (1ull << 32)) return Status::Corrupt(path + ": index larger than 4 GiB");
  std::string index(h.index_len, '\0');
  XT_RETURN_IF_ERROR(PreadAll(f.fd_, index.data(), h.index_len, h.index_off, path));
  XT_RETURN_IF_ERROR(ParseIndex(h, index, path, &f.index_));
  XT_RETURN_IF_ERROR(CheckPlace(path, f.index_.info));
  *out = std::move(f);
  return Status::Ok();
}

Status CheckPlace(const std::string& path, const ImageInfo& info) {
  size_t slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  int rank = RankOfFile(name.c_str());
  if (rank < 0) return Status::Ok();  // not under a rank file's name: nothing to compare
  const std::string held = "holds step " + std::to_string(info.step) + ", rank " + std::to_string(info.rank) + " of " +
                           std::to_string(info.world_size);
  if (info.rank != rank)
    return Status::Corrupt(path + " " + held + ": a file of another rank renamed or copied here; not loaded as rank " +
                           std::to_string(rank) + " (put it back under rank_" + std::to_string(info.rank) + ".xtc)");
  if (slash == std::string::npos || slash == 0) return Status::Ok();
  std::string dir = path.substr(0, slash);
  size_t up = dir.find_last_of('/');
  std::string folder = up == std::string::npos ? dir : dir.substr(up + 1);
  if (!AllDigits(folder.c_str())) return Status::Ok();  // a lone file, not in a step folder
  int64_t step = std::strtoll(folder.c_str(), nullptr, 10);
  if (info.step != step)
    return Status::Corrupt(path + " " + held + ": a file of another step copied or moved into folder " + folder +
                           "; not loaded as step " + folder + " (remove it, or put it back in folder " +
                           std::to_string(info.step) + ")");
  return Status::Ok();
}

Status XtcFile::ReadInto(const std::vector<void*>& dst, const ProgressFn& progress) {
  const auto& entries = index_.entries;
  if (dst.size() != entries.size()) return Status::Error("internal: wrong number of destinations");
  const std::vector<Piece> pieces = SplitIntoPieces(entries);
  std::vector<Fletcher> parts(pieces.size());
  std::vector<Status> errors(pieces.size());
  std::atomic<uint64_t> done{0};
  uint64_t total = 0;
  for (const Entry& e : entries) total += e.nbytes;
  CopyPool::Get(0).ParallelFor(pieces.size(), 0, [&](size_t k) {
    const Piece& p = pieces[k];
    auto* d = static_cast<unsigned char*>(dst[p.entry]) + p.off;
    errors[k] = PreadAll(fd_, d, p.len, entries[p.entry].offset + p.off, path_);
    if (errors[k].ok()) parts[k] = ChecksumBytes(d, p.len);  // still in cache
    done.fetch_add(p.len);
  });
  for (const Status& s : errors)
    if (!s.ok()) return s;
  if (progress) progress(done.load(), total);
  return CheckPieceSums(entries, pieces, parts, path_);
}

XtcMapping::~XtcMapping() {
  if (data_ != nullptr) munmap(data_, size_);
}

Status XtcFile::MapVerified(std::unique_ptr<XtcMapping>* out) {
  if (size_ == 0) return Status::Corrupt(path_ + ": empty");
  void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd_, 0);
  if (p == MAP_FAILED) return Status::Error("cannot map " + path_ + ": " + std::strerror(errno));
  auto m = std::make_unique<XtcMapping>(static_cast<unsigned char*>(p), size_);
  madvise(p, size_, MADV_WILLNEED);  // read ahead what the page cache lacks
  const auto& entries = index_.entries;
  const std::vector<Piece> pieces = SplitIntoPieces(entries);
  std::vector<Fletcher> parts(pieces.size());
  // The file may have shrunk since it was opened (it is never truncated by us): a read past its
  // end would be SIGBUS, so the size is checked again first.
  struct stat st {};
  if (fstat(fd_, &st) != 0 || static_cast<uint64_t>(st.st_size) < size_)
    return Status::Corrupt(path_ + ": the file shrank while it was being loaded");
  CopyPool::Get(0).ParallelFor(pieces.size(), 0, [&](size_t k) {
    const Piece& pc = pieces[k];
    parts[k] = ChecksumBytes(m->data() + entries[pc.entry].offset + pc.off, pc.len);
  });
  XT_RETURN_IF_ERROR(CheckPieceSums(entries, pieces, parts, path_));
  *out = std::move(m);
  return Status::Ok();
}

Status XtcFile::Verify(const ProgressFn& progress) {
  uint64_t total = 0;
  for (const Entry& e : index_.entries) total += e.nbytes;
  std::vector<unsigned char> buf(kWriteChunk);
  uint64_t done = 0;
  for (const Entry& e : index_.entries) {
    Fletcher f;
    for (uint64_t off = 0; off < e.nbytes; off += kWriteChunk) {
      uint64_t n = std::min(kWriteChunk, e.nbytes - off);
      XT_RETURN_IF_ERROR(PreadAll(fd_, buf.data(), n, e.offset + off, path_));
      f.Append(ChecksumBytes(buf.data(), n));
      done += n;
      if (progress) progress(done, total);
    }
    if (f.Finish() != e.sum)
      return Status::Corrupt(path_ + ": checksum mismatch in entry " + e.name + " (the file is corrupt)");
  }
  return Status::Ok();
}

}  // namespace xtimer::ckpt
