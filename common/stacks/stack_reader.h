// Reads a stack file (docs/formats.md) into a StackFile. Input is untrusted: anything that is not
// a well-formed stack file of a version this code understands is refused with a one-line reason,
// never a crash. Unknown fields are ignored (a writer of the same version may add some).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/stacks/stack_file.h"

namespace xtimer {

// Parses the bytes of one stack file. *out is overwritten; its buffers are reused, so reading
// many files into the same StackFile allocates little. On false, *error says why (no file name:
// the caller knows it) and *out holds nothing meaningful.
bool ParseStackFile(std::string_view json, StackFile* out, std::string* error);

inline constexpr size_t kMaxStackFileBytes = size_t{256} << 20;

// Memory that stack files are read into, reused from file to file: one per reading thread. The
// data is 64-byte aligned and followed by the padding the JSON parser may read past the end.
// (Alignment matters: read(2) into a buffer 16 bytes past a page boundary, where malloc puts a
// large block, copied at a quarter of the speed on the 2-core AMD EPYC machine measured in
// viewer/README.md.)
class StackReadBuffer {
 public:
  StackReadBuffer() = default;
  StackReadBuffer(const StackReadBuffer&) = delete;
  StackReadBuffer& operator=(const StackReadBuffer&) = delete;
  ~StackReadBuffer() { Release(); }

  // Room for size bytes and the padding after them; what the buffer held is not kept.
  char* Reserve(size_t size);
  // Gives the memory back (a large file leaves a large buffer behind).
  void Release();
  size_t capacity() const { return capacity_; }

 private:
  char* data_ = nullptr;
  size_t capacity_ = 0;
};

// Reads a regular file (no FIFO, device or folder; at most max_bytes: common/regular_file.h) into
// *buffer and parses it. *error, as for ParseStackFile, does not repeat the path.
bool ReadStackFile(const std::string& path, StackFile* out, StackReadBuffer* buffer, std::string* error,
                   size_t max_bytes = kMaxStackFileBytes);

}  // namespace xtimer
