// An interactive flame graph as one self-contained SVG file (no external script or font), drawn
// from a TreeView: root at the bottom, width proportional to ranks (the folded counts), colours by
// frame kind. In a browser: hovering shows the full label in a tooltip and the details line, a
// click zooms into a frame (click the background or "Reset zoom" to leave), the search box
// highlights frames matching a regular expression and shows the share they cover. A URL may carry
// a view: `py_stack.svg#s=load_batch` searches, `#z=ncclAllReduce` zooms (both: `#s=a&z=b`). Frames whose
// ranks are fewer than their parent's (where the ranks split) get a dark outline.
#pragma once

#include <string>
#include <string_view>

#include "common/byte_sink.h"
#include "viewer/tree_view.h"

namespace xtimer {

struct FlameOptions {
  std::string title = "Flame graph";
  std::string subtitle;  // one line under the title
  int width = 1200;
  int frame_height = 16;
  int max_depth = 1024;  // deeper frames are not drawn (hostile input)
};

void WriteFlameSvg(const TreeView& view, const FlameOptions& options, ByteSink& out);

}  // namespace xtimer
