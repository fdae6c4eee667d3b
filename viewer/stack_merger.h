// Merges parsed stack files, one rank at a time, into MergedStacks. This is the one merge that
// the offline viewer and the live collector share (`docs/design.md`, "One merge, two front doors"): the viewer feeds it
// files read from a folder, the collector the uploads it received.
//
//   StackMerger m({.world_size = 8});
//   for (upload : uploads) {
//     StackFile f;
//     if (!ParseStackFile(upload.bytes, &f, &err)) m.Skip(upload.name, err);
//     else if (!m.Add(f, upload.name, &err)) { /* already recorded as skipped */ }
//   }
//   MergedStacks merged = std::move(m).Finish();
#pragma once

#include <string>
#include <string_view>

#include "common/stacks/stack_file.h"
#include "viewer/merged_stacks.h"

namespace xtimer {

struct MergeOptions {
  // The job's world size; 0 takes it from the first file added. Files that disagree are skipped.
  int32_t world_size = 0;
};

class StackMerger {
 public:
  explicit StackMerger(MergeOptions options = {});

  // Adds one rank. On false (duplicate rank, world size disagrees) nothing of it was merged,
  // *error says why and the file is recorded in MergedStacks::skipped under source.
  bool Add(const StackFile& file, std::string_view source, std::string* error);
  // The same for a file read thread by thread (common/stacks/stack_file_threads.h), so that it is never
  // held whole: BeginRank with its header (its threads are not looked at), AddThread for each
  // thread in file order, then EndRank. BeginRank's false is Add's (nothing merged, recorded as
  // skipped, no EndRank). Add is these three.
  bool BeginRank(const StackFile& header, std::string_view source, std::string* error);
  void AddThread(const StackThread& thread, size_t index);
  void EndRank();
  // Records an input that could not be read or parsed, so the verdict lists it.
  void Skip(std::string_view source, std::string_view reason);
  // Moves everything from other into this (parallel reading merges one merger per thread).
  // The caller keeps the two rank sets apart (the folder reader claims each rank once); a rank in
  // both keeps this one's summary, other's is listed as skipped, the trees hold both stacks.
  void Absorb(StackMerger&& other);

  int32_t world_size() const { return out_.world_size; }
  size_t ranks_added() const { return out_.ranks.size(); }

  MergedStacks Finish() &&;

 private:
  // A thread that may be the rank's main thread (StackFile::MainThread: the first marked main,
  // else the first whose tid is the pid, else the first), kept until EndRank knows which it is.
  struct MainCandidate {
    bool set = false;
    std::vector<uint32_t> python, native;       // its frames, root first
    uint32_t python_leaf = 0, native_leaf = 0;  // where its stacks end in the trees
  };

  MergedStacks out_;
  std::vector<uint8_t> seen_;  // by rank
  int64_t open_pid_ = 0;       // of the rank between BeginRank and EndRank
  MainCandidate marked_, pid_thread_, first_thread_;
  std::vector<uint32_t> path_;  // scratch, reused per thread
  // The frame ids met last at each (thread index, depth), Python and native: most ranks repeat
  // the previous rank's stacks, and FrameTable::Is confirms a repeat cheaper than Intern finds it.
  std::vector<std::vector<uint32_t>> last_python_, last_native_;
  // Likewise the tree nodes of the last path at each thread index (StackTree::AddPath's memo).
  std::vector<std::vector<uint32_t>> nodes_python_, nodes_native_;
};

}  // namespace xtimer
