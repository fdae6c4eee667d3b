// The flash checkpoint's checksum: a 64-bit Fletcher pair over little-endian 64-bit words.
//
// For bytes B (length L, zero-padded to a multiple of 8) read as words w_0 .. w_{n-1}:
//   a = sum of w_i             (mod 2^64)
//   b = sum of (i + 1) * w_i   (mod 2^64)
// A single flipped bit or byte always changes `a`; `b` catches reordered words. It is not a
// cryptographic hash: it detects torn writes and storage corruption, not tampering. NumPy
// computes the same two numbers (docs/formats.md), so a file can be verified without xtimer.
//
// It is combinable: pieces checksummed separately (in parallel, or while streaming a file) give
// the checksum of their concatenation, as long as every piece but the last is a multiple of 8
// bytes long. The copy kernels compute it while copying, at memcpy speed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace xtimer::ckpt {

struct Checksum {
  uint64_t a = 0;
  uint64_t b = 0;
  bool operator==(const Checksum&) const = default;
  // "aaaaaaaaaaaaaaaa:bbbbbbbbbbbbbbbb" (hex, fixed width) and back.
  std::string ToHex() const;
  static bool FromHex(const std::string& s, Checksum* out);
};

// A running checksum in Fletcher form (b' = sum of (n - i) * w_i), which is what a streaming
// loop computes; Finish() converts it to the published form above.
class Fletcher {
 public:
  // Appends a piece that follows everything appended so far. All pieces but the last must be a
  // multiple of 8 bytes.
  void Append(const Fletcher& piece) {
    b_ += piece.n_ * a_ + piece.b_;
    a_ += piece.a_;
    n_ += piece.n_;
  }
  Checksum Finish() const { return {a_, (n_ + 1) * a_ - b_}; }
  uint64_t words() const { return n_; }

  // Internal: the loop state of the kernels.
  uint64_t a_ = 0, b_ = 0, n_ = 0;
};

// Checksum of len bytes at p.
Fletcher ChecksumBytes(const void* p, size_t len);
// memcpy(dst, src, len) that also returns the checksum of the bytes. With `stream` the
// destination is written with non-temporal stores (large copies into memory nobody reads soon).
Fletcher CopyWithChecksum(void* dst, const void* src, size_t len, bool stream);

inline Checksum ChecksumOf(const void* p, size_t len) { return ChecksumBytes(p, len).Finish(); }

}  // namespace xtimer::ckpt
