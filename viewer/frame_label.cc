#include "viewer/frame_label.h"

namespace xtimer {
namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is not one.
size_t Utf8Length(std::string_view s, size_t i) {
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

}  // namespace

std::string CleanFrameText(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool blank = true;  // drops leading blanks and collapses runs
  for (size_t i = 0; i < text.size();) {
    size_t n = Utf8Length(text, i);
    if (n == 0) {
      out += '?';
      blank = false;
      ++i;
      continue;
    }
    if (n == 1) {
      char c = text[i];
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == ' ') {
        if (!blank) out += ' ';
        blank = true;
      } else {
        out += c == ';' ? ':' : c;
        blank = false;
      }
    } else {
      out.append(text.substr(i, n));
      blank = false;
    }
    i += n;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (out.empty()) out = "?";
  return out;
}

std::string FramePart(const FrameInfo& frame) {
  return CleanFrameText(frame.Name()) + "@" + CleanFrameText(frame.Source());
}

std::string FrameLabel(const FrameInfo& frame, const RankSet& ranks, int32_t world_size) {
  return FramePart(frame) + "@" + ranks.Fold(kLabelMaxRanges) + "|" +
         ranks.FoldComplement(world_size, kLabelMaxRanges);
}

std::string PrintableName(std::string_view text, size_t max_len) {
  std::string out;
  text = text.substr(0, max_len + 1);
  for (size_t i = 0; i < text.size() && i < max_len;) {
    size_t n = Utf8Length(text, i);
    bool control = n == 1 && (static_cast<unsigned char>(text[i]) < 0x20 || text[i] == 0x7f);
    if (n == 0 || control) {
      out += '?';
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  if (text.size() > max_len) out += "...";
  return out;
}

}  // namespace xtimer
