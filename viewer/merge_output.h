// Writes a merge's files into one folder: py_stack.* and cpp_stack.* (folded, flame graph SVG,
// Graphviz DOT and its SVG rendering, speedscope JSON) and verdict.json. Only these fixed names
// are written, each atomically (temp name + rename); nothing from the input becomes a path.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "viewer/merged_stacks.h"
#include "viewer/verdict.h"

namespace xtimer {

enum OutputFormat : unsigned {
  kFormatSvg = 1,
  kFormatFolded = 2,
  kFormatDot = 4,
  kFormatSpeedscope = 8,
  kFormatAll = 15,
};

// "svg,folded,dot,speedscope" (any subset, any order) -> bits.
bool ParseOutputFormats(std::string_view list, unsigned* formats, std::string* error);

struct OutputOptions {
  unsigned formats = kFormatAll;
  bool collapse_idle = false;  // see ViewOptions
  size_t dot_max_nodes = 400;
  bool render_dot = true;  // also lay the DOT out into *.graph.svg
};

struct OutputResult {
  std::vector<std::string> written;   // file names (within the folder)
  std::vector<std::string> warnings;  // a rendering that failed; the rest was written
};

// Creates out_dir if needed. false (*error) when the folder cannot be made or a file not written.
bool WriteMergeOutputs(const MergedStacks& merged, const Verdict& verdict, const OutputOptions& options,
                       const std::string& out_dir, OutputResult* result, std::string* error);

}  // namespace xtimer
