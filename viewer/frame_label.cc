#include "viewer/frame_label.h"

#include "common/utf8_text.h"

namespace xtimer {

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
    if (IsControlChar(text, i, n) || (n == 1 && text[i] == ' ')) {
      if (!blank) out += ' ';
      blank = true;
    } else if (n == 1) {
      out += text[i] == ';' ? ':' : text[i];
      blank = false;
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
  return FramePart(frame) + "@" + ranks.Fold(kLabelMaxRanges) + "|" + ranks.FoldComplement(world_size, kLabelMaxRanges);
}

std::string PrintableName(std::string_view text, size_t max_len) {
  std::string out;
  text = text.substr(0, max_len + 1);
  for (size_t i = 0; i < text.size() && i < max_len;) {
    size_t n = Utf8Length(text, i);
    if (n == 0 || IsControlChar(text, i, n)) {
      out += '?';
      i += n == 0 ? 1 : n;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  if (text.size() > max_len) out += "...";
  return out;
}

}  // namespace xtimer
