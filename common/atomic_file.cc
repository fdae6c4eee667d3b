#include "common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace xtimer {
namespace {

bool Fail(std::string* error, const std::string& what, const std::string& path, int err) {
  if (error != nullptr) *error = what + " " + path + ": " + std::strerror(err);
  return false;
}

// Writes through to an open file; remembers the first error.
class FileSink final : public ByteSink {
 public:
  explicit FileSink(int fd) : ByteSink(kAtomicWriteBlock), fd_(fd) {}
  int error() const { return error_; }

 private:
  bool Drain(std::string_view bytes) override {
    const char* p = bytes.data();
    size_t left = bytes.size();
    while (left > 0) {
      ssize_t n = write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error_ = n < 0 ? errno : ENOSPC;
        return false;
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
    return true;
  }

  int fd_;
  int error_ = 0;
};

}  // namespace

bool WriteFileAtomically(const std::string& path, std::string_view content, std::string* error,
                         const AtomicWrite& how) {
  return WriteFileAtomically(
      path, [content](ByteSink& out) { out << content; }, error, how);
}

bool WriteFileAtomically(const std::string& path, const std::function<void(ByteSink&)>& produce, std::string* error,
                         const AtomicWrite& how) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  // O_EXCL|O_NOFOLLOW: a symlink planted at the temp name cannot redirect the write elsewhere.
  // A leftover temp file (of a process that died, with our pid reused) is removed once.
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = open(tmp.c_str(), flags, 0644);
  if (fd < 0 && errno == EEXIST && unlink(tmp.c_str()) == 0) fd = open(tmp.c_str(), flags, 0644);
  if (fd < 0) return Fail(error, "cannot create", tmp, errno);
  FileSink sink(fd);
  try {
    produce(sink);
  } catch (...) {  // std::bad_alloc while rendering: no temp file left behind
    close(fd);
    unlink(tmp.c_str());
    throw;
  }
  sink.Flush();
  if (sink.failed()) {
    close(fd);
    unlink(tmp.c_str());
    return Fail(error, "cannot write", tmp, sink.error());
  }
  if (how.sync && fsync(fd) != 0 && errno != EINVAL) {
    int err = errno;
    close(fd);
    unlink(tmp.c_str());
    return Fail(error, "cannot sync", tmp, err);
  }
  if (close(fd) != 0) {  // NFS and quotas report a failed write here
    int err = errno;
    unlink(tmp.c_str());
    return Fail(error, "cannot write", tmp, err);
  }
  if (how.still_wanted && !how.still_wanted()) {
    unlink(tmp.c_str());
    return true;
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return Fail(error, "cannot rename into", path, err);
  }
  return true;
}

bool MakeDirs(const std::string& path, std::string* error) {
  if (path.empty()) return Fail(error, "cannot create folder", "(empty path)", EINVAL);
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) return Fail(error, "cannot create folder", cur, errno);
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return Fail(error, "not a folder:", path, ENOTDIR);
  return true;
}

}  // namespace xtimer
