// Built instead of stack_reader_simdjson.cc when simdjson is not installed: nlohmann-json reads.
#include "common/stack_reader_impl.h"

namespace xtimer::stack_reader {

bool HaveSimdjson() { return false; }

bool ParseWithSimdjson(const char* data, size_t size, StackFile* out, std::string* error) {
  return ParseWithNlohmann(std::string_view(data, size), out, error);
}

}  // namespace xtimer::stack_reader
