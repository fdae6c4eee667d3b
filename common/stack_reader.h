// Reads a stack file (docs/formats.md) into a StackFile. Input is untrusted: anything that is not
// a well-formed stack file of a version this code understands is refused with a one-line reason,
// never a crash. Unknown fields are ignored (a writer of the same version may add some).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/stack_file.h"

namespace xtimer {

// Parses the bytes of one stack file. *out is overwritten; its buffers are reused, so reading
// many files into the same StackFile allocates little. On false, *error says why (no file name:
// the caller knows it) and *out holds nothing meaningful.
bool ParseStackFile(std::string_view json, StackFile* out, std::string* error);

inline constexpr size_t kMaxStackFileBytes = size_t{256} << 20;

// Reads a regular file (no FIFO, device or folder; at most max_bytes) into *buffer and parses it.
// *buffer is reused between calls.
bool ReadStackFile(const std::string& path, StackFile* out, std::string* buffer,
                   std::string* error, size_t max_bytes = kMaxStackFileBytes);

}  // namespace xtimer
