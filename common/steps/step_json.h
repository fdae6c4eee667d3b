// Step records as JSON (docs/formats.md, "Step records"): one object per record, as a rank sends
// them in a `steps` message and appends them to `<rank>-<world>.steps.jsonl`. Reading checks every
// field's type (a fraction where an integer belongs, a string where a number belongs: the record is
// refused with the field named) and then CheckStepRecord's rules. Unknown fields are ignored, so a
// newer rank's records still read.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/steps/step_record.h"

namespace xtimer::slowdown {

// The record of a JSON object; false and *why (one line naming the field) if it is not one.
bool StepRecordFromJson(const nlohmann::json& j, StepRecord* out, std::string* why);
// One layout-1 line (the same, after parsing the text).
bool ParseStepLine(std::string_view line, StepRecord* out, std::string* why);
// The JSON object of a record (what a rank writes; tests and tools write files with it).
nlohmann::json StepRecordToJson(const StepRecord& r);

// Reads one steps file line by line, in either layout (step_file_writer.h; a file may hold both:
// a rank restarted with a newer library appends to an older file). A layout-2 step line is read
// with the header and dictionary lines before it; every field's type is checked as in layout 1
// (the field named: `"c": "seq" is not an integer`), then CheckStepRecord's rules. One reader per
// file; it holds at most kMaxEntries entries of each dictionary table, kMaxBytes of strings.
class StepFileReader {
 public:
  static constexpr size_t kMaxEntries = 1 << 16;
  static constexpr size_t kMaxBytes = 16 << 20;

  enum class Line {
    kRecord,      // *out is the record
    kMeta,        // a header or dictionary line, taken in
    kBad,         // not a record: corrupt, cut short, a field of the wrong type (*why)
    kUnresolved,  // a step line without the header or a dictionary entry it needs (*why): the
                  // file's start, or a dictionary line, is missing
  };
  Line Take(std::string_view line, StepRecord* out, std::string* why);

 private:
  struct Coll {
    std::string comm, op;
    uint64_t bytes = 0;
    int32_t ranks = 0;
  };
  Line Header(const nlohmann::json& j, std::string* why);
  Line Dictionary(const nlohmann::json& j, std::string* why);
  Line Step(const nlohmann::json& j, StepRecord* out, std::string* why);

  bool header_ = false;
  StepRecord who_;  // rank, world, node, pid of the header
  int64_t t0_us_ = 0;
  std::vector<std::optional<std::string>> sigs_, frames_;
  std::vector<std::optional<Coll>> colls_;
  size_t bytes_ = 0;
};

}  // namespace xtimer::slowdown
