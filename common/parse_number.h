// Whole-string number parsing for command-line flags: no leading garbage, no trailing garbage,
// no overflow, inside the caller's range. false on anything else (the caller names the flag).
#pragma once

#include <string>

namespace xtimer {

bool ParseInt(const std::string& s, long long lo, long long hi, long long* out);
// Finite values only.
bool ParseDouble(const std::string& s, double* out);

}  // namespace xtimer
