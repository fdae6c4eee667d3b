// The whole merge in one call, for the collector: stack files it holds in memory (parsed from
// uploads) in, the merged files and the verdict out, written only into out_dir under fixed names.
// The viewer does the same from a folder (stack_folder.h) and then calls WriteMergeOutputs.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "common/stacks/stack_file.h"
#include "viewer/merge_output.h"
#include "viewer/stack_merger.h"
#include "viewer/verdict.h"

namespace xtimer {

struct NamedStackFile {
  std::string source;  // how messages name it ("node-a rank 5 upload"); never used as a path
  StackFile file;
};

struct MergeReport {
  Verdict verdict;
  OutputResult output;
};

// Merges files (plus inputs the caller could not parse, listed as skipped) and writes the result.
// false with *error when no file was usable (nothing is written then) or writing failed.
bool MergeToFolder(std::span<const NamedStackFile> files, std::span<const SkippedInput> unreadable,
                   const MergeOptions& merge, const OutputOptions& output, const std::string& out_dir,
                   MergeReport* report, std::string* error);

}  // namespace xtimer
