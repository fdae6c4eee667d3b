#include "viewer/string_pool.h"

#include <cstring>

namespace xtimer {

std::string_view StringPool::Intern(std::string_view s) {
  if (s.empty()) return {};
  auto it = index_.find(s);
  if (it != index_.end()) return *it;
  char* at;
  if (s.size() > kBlockBytes / 4) {
    // A long string gets memory of its own (strings are capped at 4 KiB, so this is rare).
    at = long_strings_.emplace_back(std::make_unique<char[]>(s.size())).get();
  } else {
    if (used_ + s.size() > kBlockBytes) {
      blocks_.push_back(std::make_unique<char[]>(kBlockBytes));
      used_ = 0;
    }
    at = blocks_.back().get() + used_;
    used_ += s.size();
  }
  std::memcpy(at, s.data(), s.size());
  std::string_view stored(at, s.size());
  index_.insert(stored);
  return stored;
}

}  // namespace xtimer
