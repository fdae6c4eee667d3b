// Finds where the root object's "threads" array and each of its elements lie in the bytes of a
// stack file, without parsing them. A large file can then be parsed one thread at a time
// (stack_file_threads.h): memory bounded by its largest thread, not by the whole file.
//
// Bytes are fed in file order, in pieces of any size. The splitter knows only enough JSON to find
// those spans: strings with their escapes, nesting, and the root object's keys. It checks the
// separators between the elements itself; everything else it passes on is checked by the JSON
// parser, piece by piece: the header (the file with the array emptied to `[]`) and each element
// are parsed as documents of their own. Valid pieces in valid places make a valid file.
//
// Anything it does not expect makes it stop with Scan() false ("unusual"): a root key with an
// escape, a second "threads", an element that is not an object or is nested over 1,000 levels,
// bytes after the root object, a document that is not an object. The caller then parses the whole file the ordinary
// way, which gives the usual reason for a bad file. A file the tools wrote is never unusual.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace xtimer {

class StackThreadsSplitter {
 public:
  struct Events {
    virtual ~Events() = default;
    // An element of "threads" starts at this file offset (its '{').
    virtual void ElementBegin(uint64_t offset) = 0;
    // ... and ends just before `end` (one past its '}'). False stops the scan (Scan returns false).
    virtual bool ElementEnd(uint64_t end) = 0;
  };

  // keep_header: collect header() (the file without the array's elements), for the first pass.
  explicit StackThreadsSplitter(bool keep_header) : keep_header_(keep_header) {}

  // Scans the next `size` bytes of the file. False when the file is unusual (see above) or an
  // event said stop; the splitter is then done.
  bool Scan(const char* data, size_t size, Events& events);
  // After the last byte: whether the root object was closed and only white space followed.
  bool Complete() const { return state_ == State::kAfterRoot; }
  // The file with the array's elements and the white space between them left out.
  const std::string& header() const { return header_; }
  // Why Scan() stopped on an unusual file, for tests and messages ("" when it did not).
  const char* unusual() const { return unusual_; }

 private:
  enum class State : uint8_t {
    kBeforeRoot,  // white space, then '{'
    kFirstKey,    // after '{': a key or '}'
    kKey,         // after ',': a key
    kInKey,       // inside a key's quotes
    kColon,       // after a key
    kValueStart,  // after ':'
    kValue,       // inside a root field's value (not the threads array)
    kArrayStart,  // after "threads": [
    kElement,     // inside an element
    kArrayAfter,  // after an element: ',' or ']'
    kArrayNext,   // after ',': the next element
    kAfterValue,  // after a value: ',' or '}'
    kAfterRoot,   // after the root's '}': white space only
    kStopped,
  };

  bool Unusual(const char* why) {
    unusual_ = why;
    state_ = State::kStopped;
    return false;
  }

  const bool keep_header_;
  State state_ = State::kBeforeRoot;
  uint64_t offset_ = 0;          // file offset of the next byte fed
  bool in_string_ = false;       // inside a string of a value or an element
  bool escaped_ = false;         // the previous byte in that string was a backslash
  uint32_t depth_ = 0;           // nesting inside the current value or element
  uint32_t key_len_ = 0;         // bytes of the current root key
  bool key_is_threads_ = false;  // the current root key so far equals a prefix of "threads"
  int threads_keys_ = 0;
  std::string header_;
  const char* unusual_ = "";
};

}  // namespace xtimer
