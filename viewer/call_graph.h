// The merged call tree as a Graphviz graph: one node per merged frame (function, source, ranks),
// edges from caller to callee. Frames whose ranks are fewer than their parent's (the branch where
// the ranks split) are filled in a warning colour, the node where they split has a thick border.
// Large trees keep the widest nodes (a parent always before its children) up to max_nodes.
#pragma once

#include <string>

#include "common/byte_sink.h"
#include "viewer/tree_view.h"

namespace xtimer {

struct CallGraphOptions {
  size_t max_nodes = 400;  // dot's layout grows fast with size; the flame graph has everything
  std::string title;
};

// DOT text. *shown is set to the number of frames drawn (the rest are summarised in the title).
void WriteCallGraphDot(const TreeView& view, const CallGraphOptions& options, ByteSink& out, size_t* shown = nullptr);

// Lays the DOT text out with libgvc (dot engine) and renders SVG. false and *error on failure.
bool RenderDotToSvg(const std::string& dot, std::string* svg, std::string* error);

}  // namespace xtimer
