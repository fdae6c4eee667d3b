// The checkpoint folder on disk:
//
//   DIR/<step>/rank_<r>.xtc   one image per rank (image.h), written as NAME.tmp.<pid>, fsync'ed,
//                             renamed, and the folder fsync'ed
//   DIR/latest                JSON naming the newest step whose every rank's file is durable;
//                             replaced atomically, never moved backwards
//
// Old steps beyond XTIMER_CKPT_KEEP complete ones are deleted once a newer one is complete. A
// load takes the newest complete step whose files verify, so `latest` is a convenience for
// people and other tools, not something a load depends on.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/image.h"
#include "ckpt/status.h"

namespace xtimer::ckpt {

std::string StepDir(const std::string& ckpt_dir, int64_t step);
std::string RankFile(const std::string& ckpt_dir, int64_t step, int rank);

// Called with (bytes written, total) every few MiB.
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

// Writes an image (in memory, already parsed) to `path` durably, verifying every entry's
// checksum on the way: a corrupt snapshot is never written. Large sequential writes,
// fdatasync, rename, fsync of the folder.
Status WriteImageFile(const unsigned char* image, const Index& index, const std::string& path,
                      const ProgressFn& progress = nullptr);

// After rank files of `step` were written: if every rank's file is there, moves DIR/latest to
// `step` (if newer) and deletes steps beyond the newest `keep` complete ones.
Status FinishStep(const std::string& ckpt_dir, int64_t step, int world_size, int keep, bool* complete);

struct DiskStep {
  int64_t step = -1;
  int world_size = 0;      // from the first rank file found; 0 if none could be read
  std::vector<int> ranks;  // rank files present
  bool complete = false;   // every rank 0..world_size-1 present
  std::string problem;     // when no rank file is usable, or the tracker disagrees: why ("" if fine)
};
// Steps in DIR, newest first.
Status ScanDisk(const std::string& ckpt_dir, std::vector<DiskStep>* steps);
// DIR/latest: the step, or -1 if there is none (or it is unreadable: *note says why); the world
// size it names in *world_size (0 if it names none).
int64_t ReadLatest(const std::string& ckpt_dir, std::string* note, int* world_size = nullptr);

// Removes the temp files (rank_<r>.xtc.tmp.*) in DIR's step folders that a writer killed
// mid-write left behind: unlocked (a live writer holds an flock on its temp file) and unchanged
// for a minute. Called before each rank file is written. Returns how many it removed.
int RemoveStaleTemps(const std::string& ckpt_dir);

// A file named rank_<r>.xtc must hold rank r, and one in a folder named <step> must hold that
// step: a file copied into another step's folder is refused (Corrupt), never loaded as that step.
// XtcFile::Open checks it.
Status CheckPlace(const std::string& path, const ImageInfo& info);

// A rank file opened for reading: a regular file (common/regular_file.h), header and index
// checked, its place checked (CheckPlace), data not yet.
// A rank file mapped privately: copy on write, so writing to the mapping never reaches the file
// (and the file is never written in place: a new save is a new file renamed over). Unmapped when
// destroyed.
class XtcMapping {
 public:
  XtcMapping(unsigned char* data, uint64_t size) : data_(data), size_(size) {}
  ~XtcMapping();
  XtcMapping(const XtcMapping&) = delete;
  XtcMapping& operator=(const XtcMapping&) = delete;
  unsigned char* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  unsigned char* data_;
  uint64_t size_;
};

class XtcFile {
 public:
  static Status Open(const std::string& path, XtcFile* out);
  XtcFile() = default;
  XtcFile(XtcFile&& o) noexcept { *this = std::move(o); }
  XtcFile& operator=(XtcFile&& o) noexcept;
  ~XtcFile();
  const Index& index() const { return index_; }
  const std::string& path() const { return path_; }
  // Reads entry i into dst (entries' nbytes) for every i, verifying checksums; a mismatch
  // names the file and the entry, and the caller must drop what was read.
  Status ReadInto(const std::vector<void*>& dst, const ProgressFn& progress = nullptr);
  // Verifies every checksum without keeping the data.
  Status Verify(const ProgressFn& progress = nullptr);
  // Maps the file (XtcMapping) and verifies every checksum there, on the copy threads: the
  // entries can then be used where they lie, with no copy into fresh memory (whose first touch
  // costs more than the copy itself). A mismatch names the file and the entry.
  Status MapVerified(std::unique_ptr<XtcMapping>* out);

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_;
  Index index_;
};

// fsync of a folder (after a rename into it).
Status SyncDir(const std::string& dir);

}  // namespace xtimer::ckpt
