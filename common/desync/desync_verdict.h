// The desync verdict file (docs/formats.md, "Desync verdict"): what the node agent writes for its
// ranks and the collector for the job's, from one mismatch of matcher.h. Pure text, no I/O.
#pragma once

#include <cstdint>
#include <string>

#include "common/desync/matcher.h"

namespace xtimer::desync {

// verdict.json of one mismatch decided at `unix_ms`.
std::string VerdictJson(const Mismatch& m, int64_t unix_ms);
// `unix_ms` in UTC with a strftime `format`.
std::string UtcStamp(int64_t unix_ms, const char* format);

}  // namespace xtimer::desync
