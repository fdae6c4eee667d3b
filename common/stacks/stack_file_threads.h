// A stack file read one thread at a time, so that merging a large one never holds it whole, as
// bytes or parsed: the 95 MB file of 50,000 threads in viewer/README.md is read with a few MB
// besides what the merge keeps (its whole-file parse took 0.9 GB).
//
//   StackFileThreads f;
//   if (!f.Open(path, &error)) ...        // refused: error as ReadStackFile gives it
//   f.header().rank, .world_size, ...     // every field but threads
//   f.ForEach([&](const StackThread& t, size_t index) { ... }, &error);
//
// Open reads the file once and checks all of it, the header and every thread, but keeps only the
// header: a bad file is refused before anything of it is merged. ForEach reads it a second time
// through the same open descriptor (a stack file is replaced by rename, never rewritten in place;
// one that is rewritten between the two reads makes ForEach fail after some threads were given).
//
// A file smaller than Options::whole_below, or one whose layout the splitter does not expect
// (stack_threads_splitter.h: never one the tools wrote), is parsed whole by ReadStackFile's code
// and its threads kept, with the same reasons for refusing it.
//
// Threads: one object per reading thread; not shared.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "common/stacks/stack_file.h"
#include "common/stacks/stack_reader.h"

namespace xtimer {

class StackFileThreads {
 public:
  struct Options {
    size_t max_bytes = kMaxStackFileBytes;
    // Smaller files are parsed whole: one pass, and their parse is a few MB at most.
    size_t whole_below = size_t{4} << 20;
  };
  using OnThread = std::function<void(const StackThread& thread, size_t index)>;

  StackFileThreads() = default;
  StackFileThreads(const StackFileThreads&) = delete;
  StackFileThreads& operator=(const StackFileThreads&) = delete;
  ~StackFileThreads() { Close(); }

  bool Open(const std::string& path, std::string* error, const Options& options);
  bool Open(const std::string& path, std::string* error) { return Open(path, error, Options()); }
  // The file's fields; its threads are empty unless the file was parsed whole().
  const StackFile& header() const { return file_; }
  // Whether the file was parsed whole (small, or an unusual layout) rather than thread by thread.
  bool whole() const { return whole_; }
  // Each thread in file order. False (*error) only if the file changed since Open.
  bool ForEach(const OnThread& on_thread, std::string* error);
  // Closes the file and gives back large buffers (kept up to 16 MiB for the next file).
  void Close();

 private:
  // One read of the file through the splitter: the header is kept when on_thread is null (the
  // first pass), threads are parsed and, in the second pass, given to on_thread.
  bool Pass(const OnThread* on_thread, std::string* error);

  int fd_ = -1;
  size_t size_ = 0;
  bool whole_ = true;
  StackFile file_;
  StackThread thread_;           // the thread being parsed, reused
  std::vector<char> window_;     // file bytes from the start of the thread being read
  StackReadBuffer padded_;       // one thread (or the header) with the parser's padding
  StackReadBuffer whole_bytes_;  // the file, when parsed whole
};

}  // namespace xtimer
