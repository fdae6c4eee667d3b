#include "common/stacks/stack_reader.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "common/regular_file.h"
#include "common/stacks/stack_reader_impl.h"
#include "common/utf8_text.h"

namespace xtimer {
namespace stack_reader {

void ParseState::TypeError(std::string_view field, std::string_view expected) {
  if (type_error.empty()) type_error = "field \"" + Printable(field) + "\": expected " + std::string(expected);
}

void ResetHeader(StackFile* out) {
  out->version = 0;
  out->rank = -1;
  out->world_size = 0;
  out->local_rank = -1;
  out->host.clear();
  out->pid = 0;
  out->reason.clear();
  out->time.clear();
  out->symbolized = false;
  out->process_state_code.clear();
  out->process_state_name.clear();
  out->trigger.clear();
  out->inflight_ops.clear();
}

void ResetThread(StackThread& t) {
  t.tid = 0;
  t.name.clear();
  t.python_name.clear();
  t.main = false;
  t.holds_gil.reset();
  t.state.clear();
}

void ResetNative(NativeFrame& f) {
  f.module.clear();
  f.offset.clear();
  f.function.clear();
  f.file.clear();
  f.line = 0;
  f.inlined = false;
}

void ResetPython(PythonFrame& f) {
  f.function.clear();
  f.file.clear();
  f.line = 0;
}

void AssignCapped(std::string_view s, std::string* dst) {
  if (s.size() <= kMaxStackStringBytes) return dst->assign(s), void();
  size_t keep = kMaxStackStringBytes;
  // Back to the start of a UTF-8 character (never more than 3 continuation bytes).
  for (int i = 0; i < 3 && keep > 0 && (static_cast<unsigned char>(s[keep]) & 0xC0) == 0x80; ++i) --keep;
  dst->assign(s.substr(0, keep));
  dst->append(kStackStringCutMark);
}

std::string Printable(std::string_view s) {
  std::string out;
  s = s.substr(0, 64);
  for (size_t i = 0; i < s.size();) {
    size_t n = Utf8Length(s, i);
    if (n == 0 || IsControlChar(s, i, n)) {
      out += '?';
      i += n == 0 ? 1 : n;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

bool FinishParse(const ParseState& st, const StackFile& out, std::string* error) {
  if (!st.syntax_error.empty()) return *error = st.syntax_error, false;
  if (!st.saw_root) return *error = "not a JSON object", false;
  if (!st.saw_format) return *error = "no \"format\" field: not an xtimer stack file", false;
  if (st.format != kStackFileFormat)
    return *error = "format \"" + Printable(st.format) + "\" is not " + kStackFileFormat, false;
  if (!st.saw_version) return *error = "no \"version\" field", false;
  if (out.version > kStackFileVersion)
    return *error = "version " + std::to_string(out.version) + " is newer than this reader understands (" +
                    std::to_string(kStackFileVersion) + ")",
           false;
  if (out.version < 1) return *error = "version " + std::to_string(out.version) + " is not valid", false;
  if (!st.type_error.empty()) return *error = st.type_error, false;
  if (!st.saw_world) return *error = "no \"world_size\" field", false;
  if (!st.saw_rank) return *error = "no \"rank\" field", false;
  if (out.world_size < 1 || out.world_size > kMaxWorld)
    return *error = "world_size " + std::to_string(out.world_size) + " is out of range", false;
  if (out.rank < 0 || out.rank >= out.world_size)
    return *error = "rank " + std::to_string(out.rank) + " is outside world_size " + std::to_string(out.world_size),
           false;
  if (!st.saw_threads) return *error = "no \"threads\" field", false;
  return true;
}

}  // namespace stack_reader

namespace {

// data[size .. size + kPadding) is readable.
bool ParsePadded(const char* data, size_t size, StackFile* out, std::string* error) {
  if (size == 0) return *error = "empty file", false;
  return stack_reader::ParseWithSimdjson(data, size, out, error);
}

constexpr std::align_val_t kReadAlignment{64};

}  // namespace

char* StackReadBuffer::Reserve(size_t size) {
  size_t need = size + stack_reader::kPadding;
  if (need > capacity_) {
    Release();
    // Grow by half at least, in 64 KiB steps: files of a run have similar sizes.
    size_t cap = std::max(need, capacity_ + capacity_ / 2);
    cap = (cap + 0xffff) & ~size_t{0xffff};
    data_ = static_cast<char*>(::operator new(cap, kReadAlignment));
    capacity_ = cap;
  }
  return data_;
}

void StackReadBuffer::Release() {
  if (data_ != nullptr) ::operator delete(data_, kReadAlignment);
  data_ = nullptr;
  capacity_ = 0;
}

bool ParseStackFile(std::string_view json, StackFile* out, std::string* error) {
  if (json.empty()) return *error = "empty file", false;
  // simdjson reads a little past the end: copy into a padded buffer (cheap next to parsing).
  thread_local StackReadBuffer padded;
  char* data = padded.Reserve(json.size());
  std::memcpy(data, json.data(), json.size());
  std::memset(data + json.size(), 0, stack_reader::kPadding);
  return ParsePadded(data, json.size(), out, error);
}

bool stack_reader::ReadOpenedFile(int fd, size_t size, StackFile* out, StackReadBuffer* buffer, std::string* error) {
  char* data = buffer->Reserve(size);
  size_t got = 0;
  while (got < size) {
    ssize_t n = pread(fd, data + got, size - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return *error = std::string("cannot read: ") + std::strerror(errno), false;
    if (n == 0) break;  // shrank while we read: parse what is there
    got += static_cast<size_t>(n);
  }
  std::memset(data + got, 0, stack_reader::kPadding);
  return ParsePadded(data, got, out, error);
}

bool ReadStackFile(const std::string& path, StackFile* out, StackReadBuffer* buffer, std::string* error,
                   size_t max_bytes) {
  // A FIFO, a device or a huge file planted in the folder is refused before any read.
  uint64_t size = 0;
  int fd = OpenRegularFile(path, FileRule{.what = "stack file", .max_bytes = max_bytes}, &size, error);
  if (fd < 0) return false;
  bool ok = stack_reader::ReadOpenedFile(fd, static_cast<size_t>(size), out, buffer, error);
  close(fd);
  return ok;
}

}  // namespace xtimer
