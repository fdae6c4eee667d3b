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

// The table's default for `name`, as written there ("" = unset), and parsed; never the
// environment. A struct member starts from one of these and a reader that rejects a value falls
// back to it, so each default is written once, in the table. An unknown name is an internal error
// (logged; "", 0 or false).
const char* Default(const char* name);
double DefaultDouble(const char* name);
int64_t DefaultInt(const char* name);
bool DefaultBool(const char* name);

// The raw value: the environment's if set (under the name, else under its alias), else the
// table default.
std::string String(const char* name);
double Double(const char* name);
int64_t Int(const char* name);
// The same, and a value outside [lo, hi] is reported like one that does not parse (the default
// is used): XTIMER_TRACE=-1 warns instead of quietly meaning 0.
double Double(const char* name, double lo, double hi);
int64_t Int(const char* name, int64_t lo, int64_t hi);
// 1/true/yes/on and 0/false/no/off, case-insensitive.
bool Bool(const char* name);

// XTIMER_LOG_LEVEL's words: error 0, warn 1, info 2, debug 3 (case-insensitive). False for
// anything else. Pure (no logging): common/log reads the level with it and warns itself.
bool ParseLogLevel(const char* text, int* level);

}  // namespace xtimer::env
