#include "common/prometheus_text.h"

#include <cmath>
#include <cstdio>

namespace xtimer {

std::string EscapeLabelValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

PrometheusText::Fam* PrometheusText::Find(std::string_view name) {
  for (Fam& f : families_)
    if (f.name == name) return &f;
  return nullptr;
}

void PrometheusText::Family(std::string_view name, std::string_view type, std::string_view help) {
  if (Find(name) != nullptr) return;
  families_.push_back(Fam{std::string(name), std::string(type), std::string(help), {}});
}

void PrometheusText::Add(std::string_view family, std::string_view sample, const Labels& labels, double value) {
  Fam* f = Find(family);
  if (f == nullptr) {
    Family(family, "untyped", "");
    f = &families_.back();
  }
  std::string line(sample);
  if (!labels.empty()) {
    line += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) line += ',';
      line += labels[i].first + "=\"" + EscapeLabelValue(labels[i].second) + '"';
    }
    line += '}';
  }
  line += ' ';
  if (std::isnan(value)) {
    line += "NaN";
  } else if (std::isinf(value)) {
    line += value > 0 ? "+Inf" : "-Inf";
  } else {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.10g", value);
    line += buf;
  }
  f->lines.push_back(std::move(line));
}

std::string PrometheusText::Text() const {
  std::string out;
  for (const Fam& f : families_) {
    if (f.lines.empty()) continue;
    out += "# HELP " + f.name + ' ';
    for (char c : f.help) out += (c == '\n') ? ' ' : c;  // help is one line
    out += "\n# TYPE " + f.name + ' ' + f.type + '\n';
    for (const std::string& l : f.lines) out += l + '\n';
  }
  return out;
}

}  // namespace xtimer
