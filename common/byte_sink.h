// Where a writer puts the text it produces, piece by piece, so that a large output (a flame graph
// of a million frames is hundreds of MB) never has to exist whole in memory. ByteSink buffers the
// pieces and hands them to Drain() in large blocks; StringSink keeps everything (tests, small
// outputs); WriteFileAtomically (common/atomic_file.h) streams into a temp file.
//
// After a failed Drain (full disk) the sink drops what is written next: a writer need not check
// after every piece, its caller asks failed() at the end. Header only, libc and libstdc++ only,
// like the rest of xtimer_common_lite.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

namespace xtimer {

class ByteSink {
 public:
  ByteSink(const ByteSink&) = delete;
  ByteSink& operator=(const ByteSink&) = delete;
  virtual ~ByteSink() = default;

  ByteSink& operator<<(std::string_view s) {
    if (s.size() < flush_at_ - buf_.size()) {
      buf_.append(s);
      return *this;
    }
    Flush();
    if (s.size() < flush_at_) {
      buf_.append(s);
    } else if (!failed_ && !Drain(s)) {  // a large piece goes out as it is, not copied
      failed_ = true;
    }
    return *this;
  }
  ByteSink& operator<<(const char* s) { return *this << std::string_view(s); }
  ByteSink& operator<<(const std::string& s) { return *this << std::string_view(s); }
  ByteSink& operator<<(char c) {
    buf_ += c;
    if (buf_.size() >= flush_at_) Flush();
    return *this;
  }
  // Integers in decimal, as std::to_string writes them.
  template <typename T,
            typename = std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, char>>>
  ByteSink& operator<<(T v) {
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    return *this << std::string_view(buf, static_cast<size_t>(end - buf));
  }

  // Hands the buffered bytes to Drain now (a no-op once failed, and for a StringSink).
  void Flush() {
    if (flush_at_ == kNever) return;
    if (!failed_ && !buf_.empty() && !Drain(buf_)) failed_ = true;
    buf_.clear();
  }
  bool failed() const { return failed_; }

 protected:
  // flush_at: Drain is called once this many bytes are buffered; kNever: the buffer is the output.
  static constexpr size_t kNever = std::numeric_limits<size_t>::max();
  explicit ByteSink(size_t flush_at) : flush_at_(flush_at) {}
  // Takes a block of bytes; false when they could not be written (the sink then drops the rest).
  virtual bool Drain(std::string_view bytes) = 0;

  std::string buf_;

 private:
  size_t flush_at_;
  bool failed_ = false;
};

// Keeps all that is written, in str().
class StringSink final : public ByteSink {
 public:
  StringSink() : ByteSink(kNever) {}
  const std::string& str() const { return buf_; }
  std::string Take() { return std::move(buf_); }

 private:
  bool Drain(std::string_view) override { return true; }  // never called: nothing is flushed
};

}  // namespace xtimer
