// Reads every `*.stacktrace` in one folder and merges them: the viewer's front door. Files are
// read in parallel (one StackMerger per thread, absorbed at the end); a file that cannot be read or
// parsed, a duplicate rank or a disagreeing world size is recorded as skipped, the rest is merged.
#pragma once

#include <functional>
#include <string>

#include "viewer/merged_stacks.h"
#include "viewer/stack_merger.h"

namespace xtimer {

struct FolderOptions {
  int threads = 0;  // 0: one per CPU, at most 8
  // Called now and then with (files done, files in all), from any reading thread, one at a time.
  std::function<void(size_t, size_t)> progress;
};

// false (*error) only when the folder cannot be listed. The world size is the one most file names
// (<rank>-<world>.stacktrace) agree on, unless merge.world_size sets it.
bool MergeStackFolder(const std::string& dir, const MergeOptions& merge, const FolderOptions& options,
                      MergedStacks* out, std::string* error);

}  // namespace xtimer
