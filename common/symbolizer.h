// Turns module + offset (ELF virtual address, as in stack files) into function, source file and
// line with elfutils, including the functions inlined at that address. Runs outside the traced
// process (xtimer_symbolize, later the node agent): it opens files and allocates freely.
// One Dwfl per module, opened once; results are cached per (module, offset). Never throws.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace xtimer {

struct SymbolFrame {
  std::string function;  // demangled; empty if unknown
  std::string file;      // empty if unknown
  int line = 0;          // 0 if unknown
  bool inlined = false;  // this function's code was inlined into the frame before it
};

class Symbolizer {
 public:
  // `sysroot` is prefixed to every module path (e.g. "/proc/<pid>/root" for a process in a container).
  explicit Symbolizer(std::string sysroot = "");
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // The frames at `offset` in `module`, root first: the function that holds the code, then each
  // function inlined into it, the innermost last. Empty when nothing is known. With a non-empty
  // `build_id` (hex), a module whose build-id differs (replaced on disk since) resolves nothing.
  const std::vector<SymbolFrame>& Resolve(const std::string& module, uint64_t offset,
                                          const std::string& build_id = "");

  // Why `module` resolves nothing ("" if it opened fine or was never asked for).
  std::string ModuleError(const std::string& module) const;

 private:
  struct Module;
  Module* Open(const std::string& module);
  std::string sysroot_;
  std::map<std::string, std::unique_ptr<Module>> modules_;
};

// The demangled form of a C++ symbol, or the input unchanged.
std::string Demangle(std::string_view name);

}  // namespace xtimer
