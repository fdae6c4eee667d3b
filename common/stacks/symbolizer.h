// Turns module + offset (ELF virtual address, as in stack files) into function, source file and
// line with elfutils, including the functions inlined at that address, and finds the functions
// that left no frame because they ended in a tail call (TailCalls). Runs outside the traced
// process (xtimer_symbolize, later the node agent): it opens files and allocates freely.
// One Dwfl per module, opened once; results are cached per (module, offset). Never throws.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace xtimer {

struct SymbolFrame {
  std::string function;  // demangled; empty if unknown
  std::string file;      // empty if unknown
  int line = 0;          // 0 if unknown
  bool inlined = false;  // this function's code was inlined into the frame before it
};

// A place in a module's machine code, as stack files name it: module path + ELF virtual address.
struct CodeLocation {
  std::string module;
  uint64_t offset = 0;
  auto operator<=>(const CodeLocation&) const = default;
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
  const std::vector<SymbolFrame>& Resolve(const std::string& module, uint64_t offset, const std::string& build_id = "");

  // The functions that ran between two adjacent frames of a stack without leaving a frame of
  // their own, because each ended by jumping to the next (a tail call, `jmp` instead of `call`):
  // outermost first, each as the location of its jump, minus one like a return address (resolve
  // them with Resolve). `caller` is a frame whose offset is a return address minus one, `callee`
  // any address of the frame it called. Found as gdb finds them, from DWARF call-site
  // information: the call site at the caller's return address names the function it called;
  // when that is not the callee's function, the tail call sites of that function and of the
  // functions they jump to are searched for a path to it (a name declared in one module is
  // looked up in the callee's module, so a tail call into a shared library is followed). Where
  // several paths exist, only the hops they all share are returned. Empty when there is nothing
  // between the frames, or nothing is known (no DWARF or no call-site information, an indirect
  // call, a search past 4096 functions or 32 paths). A module whose build-id differs must not be
  // asked (Resolve says so first). Cached.
  const std::vector<CodeLocation>& TailCalls(const CodeLocation& caller, const CodeLocation& callee);

  // Why `module` resolves nothing ("" if it opened fine or was never asked for).
  std::string ModuleError(const std::string& module) const;

  const std::string& sysroot() const { return sysroot_; }

 private:
  struct Module;
  friend class TailCallFinder;  // symbolizer.cc
  Module* Open(const std::string& module);
  std::string sysroot_;
  std::map<std::string, std::unique_ptr<Module>> modules_;
  std::map<std::pair<CodeLocation, CodeLocation>, std::vector<CodeLocation>> tail_calls_;
};

// The demangled form of a C++ symbol, or the input unchanged.
std::string Demangle(std::string_view name);

}  // namespace xtimer
