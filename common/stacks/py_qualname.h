// Qualified names of Python functions (`Thread.run`, `outer.<locals>.inner`), which CPython's
// frame dumper does not print: it gives a frame's file, line and the code object's plain name
// (co_name), while py-spy shows co_qualname. The name is found again from the source file, as
// a reader would: the `def`/`class` blocks by indentation (strings, brackets and continuation
// lines skipped), the innermost `def NAME` whose lines hold the frame's line, then its enclosing
// blocks. `<lambda>`, `<genexpr>` and the like take the block they are in. When the file cannot
// be read, or no `def` of that name holds the line (a file changed since it was loaded), there
// is no answer, never a guess.
//
// Runs where stacks are interpreted (xtimer_symbolize, the node agent), never in the process.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace xtimer {

class PyQualnames {
 public:
  // `sysroot` is prefixed to every file path (as Symbolizer's).
  explicit PyQualnames(std::string sysroot = "");
  ~PyQualnames();

  // The qualified name of `function` running at `line` of `file`, or "" when not found. Equal to
  // `function` for a module-level function.
  std::string Qualify(const std::string& file, const std::string& function, int line);

  // The same on source text (tests).
  static std::string QualifyIn(std::string_view source, const std::string& function, int line);

  struct Block {
    std::string name;
    bool is_def = false;
    int indent = 0;
    int first = 0, last = 0;  // lines, 1-based, inclusive
    int parent = -1;          // index of the enclosing def/class, -1 at module level
  };
  static std::vector<Block> ParseBlocks(std::string_view source);
  static std::string QualifyBlocks(const std::vector<Block>& blocks, const std::string& function, int line);

 private:
  std::string sysroot_;
  std::map<std::string, std::unique_ptr<std::vector<Block>>> files_;  // null: unreadable
};

}  // namespace xtimer
