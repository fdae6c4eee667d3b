// Finds symbols in an ELF file's static symbol table (.symtab), falling back to .dynsym.
// Used to reach CPython's fault-handler dumper where libpython builds it hidden (3.10, 3.13):
// the function is there, only not exported. Reads the file on disk; every offset is checked,
// so a truncated or hostile file yields "not found", never a crash.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace xtimer::capture {

// For each names[i] found as a defined symbol, values[i] = its st_value (else left 0).
// False (with *error) when the file cannot be read as a 64-bit ELF object.
bool LookupElfSymbols(const std::string& path, std::span<const char* const> names, std::span<uint64_t> values,
                      std::string* error);

}  // namespace xtimer::capture
