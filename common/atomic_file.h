// Writes a whole file so that readers see either the old content or the new, never a part:
// NAME.tmp.<pid> is written (and fsync'ed, unless told not to), then renamed over NAME. On
// failure (full disk, missing folder) the temp file is removed, NAME is untouched and *error
// says what failed and where, in one line. The content is given whole, or produced piece by
// piece into a ByteSink that writes through to the temp file (a large output never has to be
// held in memory).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "common/byte_sink.h"

namespace xtimer {

struct AtomicWrite {
  // fsync before the rename, so the file survives a power cut. Files that only have to be
  // whole for readers (stack files) skip it: on a busy disk an fsync can stall for seconds.
  bool sync = true;
  // Asked just before the rename; false drops the new content (nothing is written, the call
  // still succeeds). For "unless a newer file replaced it meanwhile".
  std::function<bool()> still_wanted;
};

bool WriteFileAtomically(const std::string& path, std::string_view content, std::string* error,
                         const AtomicWrite& how = {});

// produce writes the content into the sink, which writes it through to the temp file in blocks
// of kAtomicWriteBlock bytes. After a failed write the sink drops the rest (produce runs to its
// end) and the call fails as above.
inline constexpr size_t kAtomicWriteBlock = 1 << 20;
bool WriteFileAtomically(const std::string& path, const std::function<void(ByteSink&)>& produce, std::string* error,
                         const AtomicWrite& how = {});

// mkdir -p; true if the folder exists afterwards.
bool MakeDirs(const std::string& path, std::string* error);

}  // namespace xtimer
