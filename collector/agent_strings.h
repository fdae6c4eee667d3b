// Strings that come from agents (host names, agent ids, op names, triggers) are capped before the
// collector keeps them and made printable before it logs them: an agent cannot grow the
// collector's memory or write control characters into its log. Header only; no state.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/utf8_text.h"

namespace xtimer::collector {

// Cuts *s to at most n bytes without splitting a UTF-8 sequence.
inline void Truncate(std::string* s, size_t n) { CutUtf8(s, n); }

// At most n bytes of s for a log line, control characters as '?', "..." when cut.
inline std::string Printable(std::string_view s, size_t n = 64) {
  std::string out;
  for (char c : s.substr(0, n)) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  if (s.size() > n) out += "...";
  return out;
}

}  // namespace xtimer::collector
