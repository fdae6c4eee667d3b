// slowdown.json (docs/formats.md, "slowdown.json"): the verdict as the node agent, the collector
// and xtimer_slowdown write it, and as /status.json carries it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "slowdown/slowdown_verdict.h"

namespace xtimer::slowdown {

nlohmann::json FindingJson(const Finding& f);
// The object; `with_ranks` adds every judged rank's step time and score ("ranks").
nlohmann::json VerdictJson(const Verdict& v, bool with_ranks = true);
// The file's text (indented, one line per field; invalid UTF-8 cannot occur, it is replaced).
std::string VerdictText(const Verdict& v);

}  // namespace xtimer::slowdown
