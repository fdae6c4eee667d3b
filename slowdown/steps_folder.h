// Reads every `*.steps.jsonl` of a folder (docs/formats.md, "Step record"): the input of
// xtimer_slowdown. Each file is read line by line as it streams in (a line over 1 MiB is not a
// record); a line that is not a record (cut short by a crash, corrupt JSON, a field of the wrong
// type) is named with its file and line number and skipped, and the rest of the file is read. Step
// lines that need a header or dictionary line the file lacks (its start was cut off) are named
// once per file, at the first, and counted. Both layouts are read (common/steps/step_json.h). A
// file that cannot be opened (missing, a FIFO, no permission) is named and skipped. Ranks of the
// job (by the records' world size) without any record are named too.
//
// Two checks that a line alone cannot make, each named in one line and the rest kept:
// - A step more than a day (kLoneStepSeconds) from every other step of its rank in its file (a
//   corrupt time: `"t"` years ahead) is skipped, when that rank has steps in the file that are not
//   alone like this (a file of two far-apart steps keeps both).
// - A rank written twice at the same time (by two files, from two nodes, or by two processes:
//   copies of a file, two processes given one rank) keeps one writer's steps: a writer is one
//   file's steps of the rank from one node and pid; of two whose spans of time overlap, the one
//   with more steps, else the first by file name and line. Writers one after the other (a rank
//   restarted, on another node or with another world size) are all kept.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/steps/step_record.h"

namespace xtimer {

struct StepsInput {
  std::vector<slowdown::StepRecord> records;  // every file's, in file then line order
  struct Origin {
    uint32_t file = 0;  // index into `paths`
    uint64_t line = 0;  // from 1
  };
  std::vector<Origin> origins;        // each record's, as `records`
  std::vector<std::string> paths;     // the files read, in order
  std::vector<std::string> problems;  // one line each: "FILE:LINE: reason"
  size_t files = 0;                   // *.steps.jsonl found
  size_t bad_lines = 0;
  int32_t world = 0;                   // the largest world size of the records
  std::vector<int32_t> ranks_missing;  // of [0, world), no record at all
};

// A step this far (seconds) from every other step of its rank in its file is not believed.
inline constexpr double kLoneStepSeconds = 86400;

struct StepsFolderOptions {
  size_t max_problems_per_file = 5;  // more bad lines in a file are counted in one line
  // Called after each file with (files done, files in all).
  std::function<void(size_t, size_t)> progress;
};

// false (*error) only when the folder cannot be listed or holds no *.steps.jsonl.
bool ReadStepsFolder(const std::string& dir, const StepsFolderOptions& options, StepsInput* out, std::string* error);

// One file's records, appended to *out (with their origins); problems as above, lone steps
// skipped. False when it cannot be opened.
bool ReadStepsFile(const std::string& path, const StepsFolderOptions& options, StepsInput* out);

}  // namespace xtimer
