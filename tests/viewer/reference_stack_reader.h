// The tests' reference stack-file reader (nlohmann-json), independent of the product's simdjson
// reader (common/stacks/stack_reader.h): the reader tests run every case through both, the fuzz target
// compares them on every input, and the merge benchmark prints both parse rates.
#pragma once

#include <string>
#include <string_view>

#include "common/stacks/stack_file.h"

namespace xtimer::stack_reader {

// Same contract as ParseStackFile: true and *out filled, or false and *error (one line).
bool ParseWithNlohmann(std::string_view json, StackFile* out, std::string* error);

}  // namespace xtimer::stack_reader
