// Each distinct string of a merge stored once, in large blocks: a frame table of 1.5 M frames
// holds views of a few hundred thousand distinct strings instead of 6 M std::string objects
// (the 50,000-thread file of viewer/README.md). Views stay valid for the pool's life, also after
// the pool is moved.
#pragma once

#include <absl/container/flat_hash_set.h>

#include <memory>
#include <string_view>
#include <vector>

namespace xtimer {

class StringPool {
 public:
  StringPool() = default;
  StringPool(const StringPool&) = delete;
  StringPool& operator=(const StringPool&) = delete;
  StringPool(StringPool&&) = default;
  StringPool& operator=(StringPool&&) = default;

  // The pool's copy of s (the same view for equal strings); the empty view for "".
  std::string_view Intern(std::string_view s);
  size_t size() const { return index_.size(); }

 private:
  static constexpr size_t kBlockBytes = size_t{1} << 20;

  std::vector<std::unique_ptr<char[]>> blocks_;
  std::vector<std::unique_ptr<char[]>> long_strings_;
  size_t used_ = kBlockBytes;  // of the last block; full when there is none
  absl::flat_hash_set<std::string_view> index_;
};

}  // namespace xtimer
