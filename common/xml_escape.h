// Text for HTML and SVG: &, <, >, " and ' as entities (safe in element text and in quoted
// attribute values).
#pragma once

#include <string>
#include <string_view>

#include "common/byte_sink.h"

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

// The same into a sink: the runs between special characters go out whole.
inline void WriteXmlEscaped(ByteSink& out, std::string_view s) {
  size_t from = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char* entity = nullptr;
    switch (s[i]) {
      case '&': entity = "&amp;"; break;
      case '<': entity = "&lt;"; break;
      case '>': entity = "&gt;"; break;
      case '"': entity = "&quot;"; break;
      case '\'': entity = "&#39;"; break;
      default: continue;
    }
    out << s.substr(from, i - from) << entity;
    from = i + 1;
  }
  out << s.substr(from);
}

inline std::string XmlEscaped(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  AppendXmlEscaped(out, s);
  return out;
}

}  // namespace xtimer
