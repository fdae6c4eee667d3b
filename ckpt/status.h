// Status values instead of exceptions (the core is also embedded in the node agent and called
// from Python with the GIL released). A message is one line that names the file or thing and
// says what to do.
#pragma once

#include <string>
#include <utility>

namespace xtimer::ckpt {

class Status {
 public:
  // kUntrusted: a file in the shared-memory folder that is not this user's own (another user's,
  // a link, writable by others, not the kind of file it should be): never used (segment.h).
  enum class Code { kOk, kError, kNotFound, kCorrupt, kNoSpace, kBusy, kUntrusted };
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string msg) { return Status(Code::kError, std::move(msg)); }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status Corrupt(std::string msg) { return Status(Code::kCorrupt, std::move(msg)); }
  static Status NoSpace(std::string msg) { return Status(Code::kNoSpace, std::move(msg)); }
  static Status Busy(std::string msg) { return Status(Code::kBusy, std::move(msg)); }
  static Status Untrusted(std::string msg) { return Status(Code::kUntrusted, std::move(msg)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return msg_; }

 private:
  Status(Code c, std::string m) : code_(c), msg_(std::move(m)) {}
  Code code_ = Code::kOk;
  std::string msg_;
};

// errno as text, for messages.
std::string ErrnoText(int err);

}  // namespace xtimer::ckpt

#define XT_RETURN_IF_ERROR(expr)         \
  do {                                   \
    ::xtimer::ckpt::Status _st = (expr); \
    if (!_st.ok()) return _st;           \
  } while (0)
