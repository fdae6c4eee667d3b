#include "common/stacks/stack_threads_splitter.h"

namespace xtimer {
namespace {

constexpr std::string_view kThreadsKey = "threads";
// An element nested deeper than this goes to the whole-file parse: an element read on its own is
// two levels shallower than inside the file, and the parser's depth limit (1024) must decide the
// same way for both.
constexpr uint32_t kMaxElementDepth = 1000;

inline bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

}  // namespace

bool StackThreadsSplitter::Scan(const char* data, size_t size, Events& events) {
  if (state_ == State::kStopped) return false;
  // Header bytes are copied in runs: from run to the current byte, while outside the array.
  size_t run = 0;
  auto flush = [&](size_t end) {
    if (keep_header_ && end > run) header_.append(data + run, end - run);
  };
  for (size_t i = 0; i < size; ++i) {
    const char c = data[i];
    switch (state_) {
      case State::kBeforeRoot:
        if (c == '{') state_ = State::kFirstKey;
        else if (!IsSpace(c)) return Unusual("the document is not an object");
        break;
      case State::kFirstKey:
      case State::kKey:
        if (c == '"') {
          state_ = State::kInKey;
          key_len_ = 0;
          key_is_threads_ = true;
        } else if (c == '}' && state_ == State::kFirstKey) {
          state_ = State::kAfterRoot;
        } else if (!IsSpace(c)) {
          return Unusual("a root key was expected");
        }
        break;
      case State::kInKey:
        if (c == '"') {
          key_is_threads_ = key_is_threads_ && key_len_ == kThreadsKey.size();
          state_ = State::kColon;
        } else if (c == '\\') {
          return Unusual("a root key has an escape");
        } else {
          key_is_threads_ = key_is_threads_ && key_len_ < kThreadsKey.size() && kThreadsKey[key_len_] == c;
          ++key_len_;
        }
        break;
      case State::kColon:
        if (c == ':') state_ = State::kValueStart;
        else if (!IsSpace(c)) return Unusual("':' was expected after a root key");
        if (c == ':' && key_is_threads_ && ++threads_keys_ > 1) return Unusual("\"threads\" is there twice");
        break;
      case State::kValueStart:
        if (IsSpace(c)) break;
        if (c == '[' && key_is_threads_) {
          flush(i + 1);  // up to and with the '['
          state_ = State::kArrayStart;
          break;
        }
        state_ = State::kValue;
        depth_ = 0;
        in_string_ = escaped_ = false;
        [[fallthrough]];
      case State::kValue:
        if (in_string_) {
          if (escaped_) escaped_ = false;
          else if (c == '\\') escaped_ = true;
          else if (c == '"') in_string_ = false;
        } else if (c == '"') {
          in_string_ = true;
        } else if (c == '{' || c == '[') {
          ++depth_;
        } else if (c == '}' || c == ']') {
          if (depth_ == 0) {
            if (c == ']') return Unusual("']' closes nothing");
            state_ = State::kAfterRoot;
          } else {
            --depth_;
          }
        } else if (c == ',' && depth_ == 0) {
          state_ = State::kKey;
        }
        break;
      case State::kArrayStart:
      case State::kArrayNext:
        if (IsSpace(c)) break;
        if (c == ']' && state_ == State::kArrayStart) {
          run = i;  // the ']' belongs to the header again
          state_ = State::kAfterValue;
          break;
        }
        if (c != '{') return Unusual("an element of \"threads\" is not an object");
        events.ElementBegin(offset_ + i);
        state_ = State::kElement;
        depth_ = 1;
        in_string_ = escaped_ = false;
        break;
      case State::kElement: {
        // The hot loop: most bytes of a large file are here, most of them inside strings.
        size_t j = i;
        for (; j < size; ++j) {
          const char e = data[j];
          if (in_string_) {
            if (escaped_) escaped_ = false;
            else if (e == '\\') escaped_ = true;
            else if (e == '"') in_string_ = false;
          } else if (e == '"') {
            in_string_ = true;
          } else if (e == '{' || e == '[') {
            if (++depth_ > kMaxElementDepth) return Unusual("an element of \"threads\" is nested too deep");
          } else if ((e == '}' || e == ']') && --depth_ == 0) {
            break;
          }
        }
        i = j;
        if (j == size) break;  // the element goes on in the next piece
        state_ = State::kArrayAfter;
        if (!events.ElementEnd(offset_ + j + 1)) return Unusual("stopped");
        break;
      }
      case State::kArrayAfter:
        if (c == ',') state_ = State::kArrayNext;
        else if (c == ']') run = i, state_ = State::kAfterValue;
        else if (!IsSpace(c)) return Unusual("',' or ']' was expected after an element of \"threads\"");
        break;
      case State::kAfterValue:
        if (c == ',') state_ = State::kKey;
        else if (c == '}') state_ = State::kAfterRoot;
        else if (!IsSpace(c)) return Unusual("',' or '}' was expected after a root value");
        break;
      case State::kAfterRoot:
        if (!IsSpace(c)) return Unusual("content after the root object");
        break;
      case State::kStopped: return false;
    }
  }
  bool in_array = state_ == State::kArrayStart || state_ == State::kElement || state_ == State::kArrayAfter ||
                  state_ == State::kArrayNext;
  if (!in_array) flush(size);
  offset_ += size;
  return true;
}

}  // namespace xtimer
