// Prometheus text exposition format 0.0.4 (what /metrics serves). Families are declared with
// their type and help; samples may be added in any order and come out grouped per family, as
// the format requires. Label values are escaped; non-finite values are written as Prometheus
// spells them (NaN, +Inf, -Inf).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace xtimer {

using Labels = std::vector<std::pair<std::string, std::string>>;

class PrometheusText {
 public:
  // type: counter, gauge, summary, histogram, untyped. Declaring a family twice is a no-op.
  void Family(std::string_view name, std::string_view type, std::string_view help);
  // `sample` is the family name or the family name plus _sum / _count / _bucket / _total.
  void Add(std::string_view family, std::string_view sample, const Labels& labels, double value);
  void Add(std::string_view family, const Labels& labels, double value) { Add(family, family, labels, value); }
  std::string Text() const;

  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

 private:
  struct Fam {
    std::string name, type, help;
    std::vector<std::string> lines;
  };
  Fam* Find(std::string_view name);
  std::vector<Fam> families_;
};

// A label value with \, " and newline escaped.
std::string EscapeLabelValue(std::string_view v);

}  // namespace xtimer
