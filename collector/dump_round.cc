#include "collector/dump_round.h"

#include <sys/stat.h>
#include <time.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/log.h"

namespace xtimer::collector {
namespace {

constexpr size_t kMaxSkippedPerRound = 1000;

// "20261122T101530Z"
std::string CompactUtc(int64_t unix_ms) {
  time_t secs = static_cast<time_t>(unix_ms / 1000);
  tm t;
  gmtime_r(&secs, &t);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d%02d%02dT%02d%02d%02dZ", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday, t.tm_hour,
                t.tm_min, t.tm_sec);
  return buf;
}

}  // namespace

DumpRound::DumpRound(int32_t world, size_t upload_window, double upload_idle_s)
    : pacing(upload_window, upload_idle_s),
      world_(world),
      merger_(std::make_unique<StackMerger>(MergeOptions{.world_size = world})) {}

DumpRound::AddResult DumpRound::Add(const StackFile& file, const std::string& source, std::string* path,
                                    std::string* error) {
  MutexLock lock(mu_);
  if (closed_) return AddResult::kClosed;
  if (have_.contains(file.rank)) return AddResult::kDuplicate;
  if (world_ != 0 && file.world_size != world_) {
    *error = "the stack file says world size " + std::to_string(file.world_size) + ", the job's is " +
             std::to_string(world_);
    if (skipped_ < kMaxSkippedPerRound) merger_->Skip(source, *error), ++skipped_;
    return AddResult::kWorldMismatch;
  }
  if (!merger_->Add(file, source, error)) return AddResult::kMergeFailed;
  if (world_ == 0) world_ = merger_->world_size();
  have_.insert(file.rank);
  if (have_.size() >= static_cast<size_t>(world_)) complete = true;
  path->clear();
  if (dir_ok) {
    char name_buf[64];
    std::snprintf(name_buf, sizeof name_buf, "/%05d-%05d.stacktrace", file.rank, world_);
    *path = dir + name_buf;
  }
  return AddResult::kAdded;
}

void DumpRound::Skip(const std::string& source, const std::string& reason) {
  MutexLock lock(mu_);
  if (!closed_ && skipped_ < kMaxSkippedPerRound) {
    merger_->Skip(source, reason);
    ++skipped_;
  }
}

bool DumpRound::Has(int32_t rank) const {
  MutexLock lock(mu_);
  return have_.contains(rank);
}

size_t DumpRound::Received() const {
  MutexLock lock(mu_);
  return have_.size();
}

bool DumpRound::HasAll(const std::set<int32_t>& ranks) const {
  if (ranks.empty()) return false;
  MutexLock lock(mu_);
  for (int32_t r : ranks)
    if (!have_.contains(r)) return false;
  return true;
}

DumpRound::Closed DumpRound::Close() {
  MutexLock lock(mu_);
  closed_ = true;
  return Closed{std::move(merger_), world_, complete};
}

void CreateRoundFolder(const std::string& out_dir, int64_t hang_ms, const std::set<std::string>& used_names,
                       DumpRound* round) {
  std::string base = CompactUtc(hang_ms);
  for (int n = 1; n < 1000; ++n) {
    std::string name = n == 1 ? base : base + "-" + std::to_string(n);
    if (used_names.contains(name)) continue;
    if (out_dir.empty()) {
      round->name = name;
      break;
    }
    std::string dir = out_dir + "/" + name;
    if (mkdir(dir.c_str(), 0755) == 0) {
      round->name = name;
      round->dir = dir;
      round->dir_ok = true;
      break;
    }
    if (errno != EEXIST) {
      Log(LogLevel::kError, "collector: cannot create %s: %s (this dump round is merged but not written)", dir.c_str(),
          strerror(errno));
      round->name = name;
      round->dir = dir;
      break;
    }
  }
  if (round->name.empty()) round->name = base + "-" + round->dump_id;  // 999 rounds in one second
}

}  // namespace xtimer::collector
