// Text for HTML and SVG: &, <, >, " and ' as entities (safe in element text and in quoted
// attribute values).
#pragma once

#include <string>
#include <string_view>

namespace xtimer {

inline void AppendXmlEscaped(std::string& out, std::string_view s) {
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
}

inline std::string XmlEscaped(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  AppendXmlEscaped(out, s);
  return out;
}

}  // namespace xtimer
