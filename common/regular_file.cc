#include "common/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace xtimer {

const char* FileTypeName(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFDIR: return "a folder";
    case S_IFLNK: return "a symbolic link";
    default: return "not a file";
  }
}

std::string ByteSize(uint64_t n) {
  char b[32];
  if (n >= (uint64_t{1} << 30)) std::snprintf(b, sizeof b, "%.1f GiB", static_cast<double>(n) / (1 << 30));
  else if (n >= (uint64_t{1} << 20)) std::snprintf(b, sizeof b, "%.1f MiB", static_cast<double>(n) / (1 << 20));
  else if (n >= (uint64_t{1} << 10)) std::snprintf(b, sizeof b, "%.1f KiB", static_cast<double>(n) / (1 << 10));
  else std::snprintf(b, sizeof b, "%llu bytes", static_cast<unsigned long long>(n));
  return b;
}

int OpenRegularFile(const std::string& path, const FileRule& rule, uint64_t* size, std::string* error) {
  int flags = (rule.read_write ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  if (!rule.follow_links) flags |= O_NOFOLLOW;
  int fd = open(path.c_str(), flags);
  if (fd < 0) {
    int err = errno;
    if (err == ELOOP && !rule.follow_links)
      *error = std::string("is a symbolic link; a ") + rule.what + " is read only under its own name";
    else if (err == ENOENT) *error = "does not exist";
    else *error = std::string("cannot open it: ") + std::strerror(err);
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    *error = std::string("cannot stat it: ") + std::strerror(errno);
    close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    *error = std::string("is ") + FileTypeName(st.st_mode) + ", not a regular file; only a regular file is read as a " +
             rule.what;
    close(fd);
    return -1;
  }
  if (static_cast<uint64_t>(st.st_size) > rule.max_bytes) {
    *error = "is " + ByteSize(static_cast<uint64_t>(st.st_size)) + ", more than a " + rule.what + " can hold (" +
             ByteSize(rule.max_bytes) + "); is it the right file?";
    close(fd);
    return -1;
  }
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

bool ReadRegularFile(const std::string& path, const FileRule& rule, std::string* out, std::string* error) {
  uint64_t size = 0;
  int fd = OpenRegularFile(path, rule, &size, error);
  if (fd < 0) return false;
  out->resize(static_cast<size_t>(size));
  size_t got = 0;
  while (got < out->size()) {
    ssize_t n = read(fd, out->data() + got, out->size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = std::string("cannot read it: ") + std::strerror(errno);
      close(fd);
      return false;
    }
    if (n == 0) break;  // shrank while we read: what is there
    got += static_cast<size_t>(n);
  }
  close(fd);
  out->resize(got);  // a file that grew meanwhile is read up to the size it had: never more
  return true;
}

}  // namespace xtimer
