// Fills in function / file / line (and inlined frames) in a stack file written by the preloaded
// library (docs/formats.md, "Stack file"), which holds only module + offset per native frame.
// Used by xtimer_symbolize and, later, the node agent. Bad input gets a clear error and the file
// is left as it was.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "common/stacks/symbolizer.h"

namespace xtimer {

struct SymbolizeSummary {
  bool already = false;                              // the file said symbolized: true; nothing was done
  int frames = 0;                                    // native frames looked at
  int resolved = 0;                                  // of which something was found
  std::map<std::string, std::string> module_errors;  // module -> why it resolved nothing
};

// JSON text in, JSON text out (unknown fields kept, key order kept).
bool SymbolizeStackJson(std::string_view json, Symbolizer& symbolizer, std::string* out, SymbolizeSummary* summary,
                        std::string* error);

// Rewrites `path` in place: a temp file renamed over it. If the file was replaced meanwhile (a
// newer dump), the newer file is left alone. *error names the file.
bool SymbolizeStackFile(const std::string& path, Symbolizer& symbolizer, SymbolizeSummary* summary, std::string* error);

}  // namespace xtimer
