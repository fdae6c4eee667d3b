// Step records as text, written with the small JSON writer (common/json_writer.h) so that the
// preloaded library can use it (docs/formats.md, "Step records"):
// - StepRecordV1Json: the self-contained JSON object of one record (layout 1), as a rank sends it
//   to its node agent in `steps` messages, and as steps files were written before layout 2;
// - StepFileWriter: the lines of a steps file in layout 2. Strings that repeat from step to step
//   (kernel signatures, a collective's communicator, op, size and members, sampled stacks) go once
//   into a dictionary line when first used, and each step line refers to them by index, with
//   times as integer microseconds relative to the step. A header line (rank, world, node, pid and
//   the base second of the step times) starts each writer's part of a file; it also resets the
//   dictionary, so a process that appends to an older file, or a writer whose dictionary is full,
//   starts again with one.
// Reading both is step_json.h's (StepRecordFromJson, StepFileReader).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>

#include "common/steps/step_record.h"

namespace xtimer::slowdown {

// The layout-1 object of a record on one line (no newline). Times with 6 decimals, durations with
// 6 significant digits; a non-finite value (unknown: a collective's GPU start or end, the issue
// latency) is written as null.
std::string StepRecordV1Json(const StepRecord& r);

class StepFileWriter {
 public:
  // Before a table holds this many entries, or its strings this many bytes, the writer starts
  // again with a header (the reader's memory stays bounded, and so does the writer's).
  static constexpr size_t kMaxEntries = 4096;
  static constexpr size_t kMaxBytes = 1 << 20;

  // Appends to *out the lines (each ending in '\n') that add `r` to the file: a header when this
  // writer has written none (or `r` has another rank, world, node or pid), dictionary lines for
  // what `r` uses that is not in the dictionary yet, then the step line. A collective without a
  // communicator is left out (a reader drops it anyway).
  void Append(const StepRecord& r, std::string* out);
  // The next Append starts with a header (another file, or the file was written by someone else).
  void Reset();

 private:
  using CollKey = std::tuple<std::string, std::string, uint64_t, int32_t>;  // comm, op, bytes, ranks
  struct Table {
    std::unordered_map<std::string, uint32_t> strings;
    std::map<CollKey, uint32_t> colls;
    size_t bytes = 0;
    size_t size() const { return strings.size() + colls.size(); }
  };
  void Header(const StepRecord& r, std::string* out);

  bool started_ = false;
  int32_t rank_ = 0, world_ = 0;
  int64_t pid_ = 0;
  std::string node_;
  int64_t t0_s_ = 0;
  Table sigs_, colls_, frames_;
};

}  // namespace xtimer::slowdown
