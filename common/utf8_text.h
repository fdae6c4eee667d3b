// UTF-8 for text that reaches a terminal, a folded file, SVG or DOT: which bytes form a valid
// character, and which characters are controls. C1 controls (U+0080..U+009F, two bytes C2 80..C2
// 9F) count as controls: U+009B is CSI, which terminals take as the start of an escape sequence
// just as they take ESC [.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace xtimer {

// Length of the valid UTF-8 sequence starting at s[i] (1 to 4), or 0 if it is not one (a stray
// continuation byte, a truncated, overlong or surrogate sequence, beyond U+10FFFF).
inline size_t Utf8Length(std::string_view s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  if (n == 2 && c < 0xC2) return 0;  // overlong
  if (n == 3) {
    unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0)) return 0;  // overlong, surrogate
  }
  if (n == 4) {
    unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
    if ((c == 0xF0 && c1 < 0x90) || c > 0xF4 || (c == 0xF4 && c1 >= 0x90)) return 0;
  }
  return n;
}

// Whether the valid character of length n at s[i] is a control: C0 (below 0x20), DEL, or C1.
inline bool IsControlChar(std::string_view s, size_t i, size_t n) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  if (n == 1) return c < 0x20 || c == 0x7f;
  return n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0;
}

// Cuts *s to at most n bytes without splitting a UTF-8 sequence (a cut string stays as valid as
// it was).
inline void CutUtf8(std::string* s, size_t n) {
  if (s->size() <= n) return;
  while (n > 0 && (static_cast<unsigned char>((*s)[n]) & 0xC0) == 0x80) --n;
  s->resize(n);
}

}  // namespace xtimer
