// Every XTIMER_* environment variable, in one table, read in one place.
//
// docs/config.md documents the same table; tests/common/check_env_docs.py fails when the two
// (or any XTIMER_* name used in the sources) disagree. Readers never throw: a value that does
// not parse is reported once on stderr and the default is used.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace xtimer::env {

struct Var {
  const char* name;
  const char* default_value;  // as a user would write it; "" means unset
  const char* meaning;
  // The name the seed (xpu_timer) gave the same setting, read when `name` is unset; or nullptr.
  const char* alias = nullptr;
};

// The whole table, in documentation order.
std::span<const Var> All();
// The table row for `name`, or nullptr.
const Var* Find(std::string_view name);

// The raw value: the environment's if set (under the name, else under its alias), else the
// table default.
std::string String(const char* name);
double Double(const char* name);
int64_t Int(const char* name);
// 1/true/yes/on and 0/false/no/off, case-insensitive.
bool Bool(const char* name);

}  // namespace xtimer::env
