#include "viewer/merge_to_folder.h"

namespace xtimer {

bool MergeToFolder(std::span<const NamedStackFile> files, std::span<const SkippedInput> unreadable,
                   const MergeOptions& merge, const OutputOptions& output, const std::string& out_dir,
                   MergeReport* report, std::string* error) {
  StackMerger merger(merge);
  for (const SkippedInput& s : unreadable) merger.Skip(s.source, s.reason);
  std::string why;
  for (const NamedStackFile& f : files) merger.Add(f.file, f.source, &why);
  if (merger.ranks_added() == 0) {
    *error = files.empty() && unreadable.empty()
                 ? "no stack file to merge"
                 : "no usable stack file among " + std::to_string(files.size() + unreadable.size()) + " inputs";
    return false;
  }
  MergedStacks merged = std::move(merger).Finish();
  report->verdict = ComputeVerdict(merged);
  return WriteMergeOutputs(merged, report->verdict, output, out_dir, &report->output, error);
}

}  // namespace xtimer
