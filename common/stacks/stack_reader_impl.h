// Internal to the stack reader: what its JSON parser (simdjson, stack_reader_simdjson.cc) and the
// tests' reference reader (nlohmann-json, tests/viewer/reference_stack_reader.cc) share. Both fill
// StackFile in place, reusing its buffers, and leave the checks that need the whole document to
// FinishParse.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/stacks/stack_file.h"
#include "common/stacks/stack_reader.h"

namespace xtimer::stack_reader {

inline constexpr int64_t kMaxWorld = kMaxStackWorldSize;
inline constexpr size_t kPadding = 64;  // bytes readable past the end (simdjson's SIMDJSON_PADDING)

// What a back end saw; syntax_error stops parsing, type_error is remembered and parsing goes on so
// that a newer version's file is reported as such rather than by its first unfamiliar field.
struct ParseState {
  bool saw_root = false, saw_format = false, saw_version = false, saw_rank = false, saw_world = false,
       saw_threads = false;
  std::string format;
  std::string syntax_error, type_error;

  void TypeError(std::string_view field, std::string_view expected);
};

// Clears the header fields and the ops (threads are reused element by element).
void ResetHeader(StackFile* out);
void ResetThread(StackThread& t);
void ResetNative(NativeFrame& f);
void ResetPython(PythonFrame& f);

// Reuses the element at *used if there is one (clearing it), else appends: reading thousands of
// files into one StackFile then allocates only for growth.
template <typename T, typename Reset>
T& NextElement(std::vector<T>& v, size_t* used, Reset reset) {
  if (*used < v.size()) {
    reset(v[*used]);
  } else {
    v.emplace_back();
  }
  return v[(*used)++];
}

// *dst = s, cut to kMaxStackStringBytes (stack_file.h) with the cut mark when longer. Both back
// ends store every string through this (or its fast path for short strings), so they agree.
void AssignCapped(std::string_view s, std::string* dst);

// A short, printable rendering of an input string for messages.
std::string Printable(std::string_view s);

// The checks after parsing, in the order that makes the best message.
bool FinishParse(const ParseState& st, const StackFile& out, std::string* error);

// ReadStackFile's reading and parsing of a file it opened: the first `size` bytes of fd.
bool ReadOpenedFile(int fd, size_t size, StackFile* out, StackReadBuffer* buffer, std::string* error);

// data[size .. size + kPadding) must be readable.
bool ParseWithSimdjson(const char* data, size_t size, StackFile* out, std::string* error);
// One element of a stack file's "threads" (an object), as a document of its own: the same rules as
// the element inside a whole file. data[size .. size + kPadding) must be readable.
bool ParseThreadWithSimdjson(const char* data, size_t size, StackThread* out, std::string* error);

}  // namespace xtimer::stack_reader
