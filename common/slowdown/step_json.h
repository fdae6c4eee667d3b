// Step records as JSON (docs/formats.md, "Step records"): one object per record, as a rank sends
// them in a `steps` message and appends them to `<rank>-<world>.steps.jsonl`. Reading checks every
// field's type (a fraction where an integer belongs, a string where a number belongs: the record is
// refused with the field named) and then CheckStepRecord's rules. Unknown fields are ignored, so a
// newer rank's records still read.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/slowdown/step_record.h"

namespace xtimer::slowdown {

// The record of a JSON object; false and *why (one line naming the field) if it is not one.
bool StepRecordFromJson(const nlohmann::json& j, StepRecord* out, std::string* why);
// One line of a steps file (the same, after parsing the text).
bool ParseStepLine(std::string_view line, StepRecord* out, std::string* why);
// The JSON object of a record (what a rank writes; tests and tools write files with it).
nlohmann::json StepRecordToJson(const StepRecord& r);

}  // namespace xtimer::slowdown
