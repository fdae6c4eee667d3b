// Strings the judge sees again and again (node names, communicators, kernel signatures, op names)
// as small numbers. At most kMax names: beyond that a new name gets kOverflow, and the judge
// ignores what carries it (a sender that makes up a new communicator per step cannot grow memory).
// Header only; not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace xtimer::slowdown {

class Names {
 public:
  static constexpr uint32_t kMax = 100000;
  static constexpr uint32_t kOverflow = UINT32_MAX;

  uint32_t Id(const std::string& name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    if (names_.size() >= kMax) return kOverflow;
    uint32_t id = static_cast<uint32_t>(names_.size());
    ids_.emplace(name, id);
    names_.push_back(name);
    return id;
  }
  const std::string& Name(uint32_t id) const {
    static const std::string kUnknown = "?";
    return id < names_.size() ? names_[id] : kUnknown;
  }
  size_t size() const { return names_.size(); }

 private:
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
};

}  // namespace xtimer::slowdown
