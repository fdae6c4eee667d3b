#include "common/stacks/stack_file_threads.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/regular_file.h"
#include "common/stacks/stack_reader_impl.h"
#include "common/stacks/stack_threads_splitter.h"

namespace xtimer {
namespace {

// Bytes read at a time. The window holds one piece plus the thread that straddles it.
constexpr size_t kPieceBytes = size_t{1} << 20;
// Buffers up to this size are kept from file to file (files of a run have similar sizes).
constexpr size_t kKeepBytes = size_t{16} << 20;

}  // namespace

void StackFileThreads::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  size_ = 0;
  whole_ = true;
  std::vector<char>().swap(window_);
  if (padded_.capacity() > kKeepBytes) padded_.Release();
  if (whole_bytes_.capacity() > kKeepBytes) whole_bytes_.Release();
  if (file_.threads.size() > 4096) file_ = StackFile();  // a hostile file's millions of threads
}

bool StackFileThreads::Open(const std::string& path, std::string* error, const Options& options) {
  Close();
  uint64_t size = 0;
  fd_ = OpenRegularFile(path, FileRule{.what = "stack file", .max_bytes = options.max_bytes}, &size, error);
  if (fd_ < 0) return false;
  size_ = static_cast<size_t>(size);
  auto parse_whole = [&] {
    whole_ = true;
    bool ok = stack_reader::ReadOpenedFile(fd_, size_, &file_, &whole_bytes_, error);
    // The parsed file holds its own strings: a large file's bytes are not kept while it is merged.
    if (whole_bytes_.capacity() > kKeepBytes) whole_bytes_.Release();
    close(fd_);
    fd_ = -1;
    return ok;
  };
  if (size_ < options.whole_below) return parse_whole();
  whole_ = false;
  std::string why;
  if (!Pass(nullptr, &why)) {
    // An unusual layout, a truncated file or a thread that does not parse: the whole-file parse
    // gives the reason it always gave (or reads a valid file the splitter did not expect).
    return parse_whole();
  }
  return true;
}

bool StackFileThreads::ForEach(const OnThread& on_thread, std::string* error) {
  if (whole_) {
    for (size_t i = 0; i < file_.threads.size(); ++i) on_thread(file_.threads[i], i);
    return true;
  }
  std::string why;
  if (!Pass(&on_thread, &why)) return *error = "the file changed while it was read (" + why + ")", false;
  return true;
}

bool StackFileThreads::Pass(const OnThread* on_thread, std::string* error) {
  const bool first = on_thread == nullptr;
  StackThreadsSplitter splitter(/*keep_header=*/first);

  // Parses each element the splitter finds, out of the window, and hands it on.
  struct ThreadParser final : StackThreadsSplitter::Events {
    StackFileThreads& f;
    const OnThread* on_thread;
    uint64_t window_start = 0;  // file offset of window_[0]
    bool in_element = false;
    uint64_t element_begin = 0;
    size_t index = 0;
    std::string error;

    ThreadParser(StackFileThreads& file, const OnThread* on) : f(file), on_thread(on) {}
    void ElementBegin(uint64_t offset) override {
      in_element = true;
      element_begin = offset;
    }
    bool ElementEnd(uint64_t end) override {
      in_element = false;
      size_t len = static_cast<size_t>(end - element_begin);
      char* data = f.padded_.Reserve(len);
      std::memcpy(data, f.window_.data() + (element_begin - window_start), len);
      std::memset(data + len, 0, stack_reader::kPadding);
      if (!stack_reader::ParseThreadWithSimdjson(data, len, &f.thread_, &error)) return false;
      if (on_thread != nullptr) (*on_thread)(f.thread_, index);
      ++index;
      return true;
    }
  } parser(*this, on_thread);

  size_t window_len = 0;
  uint64_t read_to = 0;
  while (read_to < size_) {
    // Keep only the bytes of the thread being read; make room for the next piece after them.
    uint64_t keep = parser.in_element ? parser.element_begin : read_to;
    size_t drop = static_cast<size_t>(keep - parser.window_start);
    if (drop > 0) std::memmove(window_.data(), window_.data() + drop, window_len - drop);
    parser.window_start = keep;
    window_len -= drop;
    size_t want = static_cast<size_t>(std::min<uint64_t>(kPieceBytes, size_ - read_to));
    if (window_.size() < window_len + want) window_.resize(window_len + want);
    ssize_t n = pread(fd_, window_.data() + window_len, want, static_cast<off_t>(read_to));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return *error = std::string("cannot read: ") + std::strerror(errno), false;
    if (n == 0) break;  // shrank while we read
    bool go_on = splitter.Scan(window_.data() + window_len, static_cast<size_t>(n), parser);
    window_len += static_cast<size_t>(n);
    read_to += static_cast<uint64_t>(n);
    if (!go_on) return *error = parser.error.empty() ? splitter.unusual() : parser.error, false;
  }
  if (!splitter.Complete()) return *error = "the file ended early", false;
  if (first) {
    // The header: the file with "threads" emptied, parsed as a file of its own.
    if (!ParseStackFile(splitter.header(), &file_, error)) return false;
  }
  return true;
}

}  // namespace xtimer
