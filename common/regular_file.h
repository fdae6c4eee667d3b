// The one rule for opening a file that someone else named (a message on the agent socket, a
// folder's listing, a flag, a module path in a stack file): it must be a regular file no larger
// than its format can hold. Anything else is refused at once with a one-line reason:
//  - open(2) with O_NONBLOCK, so a FIFO never blocks the open (a FIFO planted where a file was
//    expected used to hang the agent, the checkpoint loader and `xtimer_ckpt inspect`);
//  - O_NOFOLLOW when the caller asks (paths a process hands us, files we wrote ourselves);
//  - fstat on the open descriptor: a FIFO, device (/dev/zero), socket or folder is refused, and
//    so is a file larger than `max_bytes` (no reader grows without bound).
// Reads of the returned descriptor behave as usual (O_NONBLOCK does nothing to regular files).
// *error is the reason without the path ("is a FIFO, not a regular file; ..."): every caller
// writes "<path>: <reason>" in its own words, so each message names the file once.
#pragma once

#include <cstdint>
#include <string>

namespace xtimer {

struct FileRule {
  const char* what = "file";        // the kind, in messages: "stack file", "checkpoint file"
  uint64_t max_bytes = UINT64_MAX;  // the most the format can hold
  bool follow_links = true;         // false: a symbolic link is refused (O_NOFOLLOW)
  bool read_write = false;          // O_RDWR instead of O_RDONLY (shared-memory segments)
};

// Opens `path` by the rule: the descriptor (close-on-exec; the caller closes it) and, in *size,
// the file's size; -1 and *error otherwise.
int OpenRegularFile(const std::string& path, const FileRule& rule, uint64_t* size, std::string* error);

// The whole file by the rule (at most max_bytes, even if it grows while read).
bool ReadRegularFile(const std::string& path, const FileRule& rule, std::string* out, std::string* error);

// "a FIFO", "a character device", "a folder", ... for a st_mode.
const char* FileTypeName(unsigned mode);

// "3.2 GiB", "256 MiB", "17 bytes".
std::string ByteSize(uint64_t n);

}  // namespace xtimer
