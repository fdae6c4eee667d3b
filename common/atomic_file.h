// Writes a whole file so that readers see either the old content or the new, never a part:
// NAME.tmp.<pid> is written, fsync'ed, then renamed over NAME. On failure (full disk, missing
// folder) the temp file is removed, NAME is untouched and *error says what failed and where.
#pragma once

#include <string>
#include <string_view>

namespace xtimer {

bool WriteFileAtomically(const std::string& path, std::string_view content, std::string* error);

// mkdir -p; true if the folder exists afterwards.
bool MakeDirs(const std::string& path, std::string* error);

}  // namespace xtimer
