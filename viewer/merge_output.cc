#include "viewer/merge_output.h"

#include "common/atomic_file.h"
#include "viewer/call_graph.h"
#include "viewer/flame_svg.h"
#include "viewer/folded_writer.h"
#include "viewer/speedscope_writer.h"
#include "viewer/tree_view.h"

namespace xtimer {

bool ParseOutputFormats(std::string_view list, unsigned* formats, std::string* error) {
  *formats = 0;
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view f = list.substr(0, comma);
    if (f == "svg") *formats |= kFormatSvg;
    else if (f == "folded") *formats |= kFormatFolded;
    else if (f == "dot") *formats |= kFormatDot;
    else if (f == "speedscope") *formats |= kFormatSpeedscope;
    else if (!f.empty())
      return *error = "unknown format \"" + std::string(f) + "\" (svg, folded, dot, speedscope)", false;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  if (*formats == 0) return *error = "no output format given", false;
  return true;
}

bool WriteMergeOutputs(const MergedStacks& m, const Verdict& verdict, const OutputOptions& o,
                       const std::string& out_dir, OutputResult* result, std::string* error) {
  if (!MakeDirs(out_dir, error)) return false;
  // Each file is streamed into its temp file as it is rendered: a flame graph or speedscope file
  // of a million frames is hundreds of MB, which never has to be held whole.
  auto write = [&](const std::string& name, const std::function<void(ByteSink&)>& produce) {
    if (!WriteFileAtomically(out_dir + "/" + name, produce, error)) return false;
    result->written.push_back(name);
    return true;
  };
  auto write_text = [&](const std::string& name, std::string_view content) {
    return write(name, [content](ByteSink& out) { out << content; });
  };
  std::string where = verdict.reported.size() == 1 ? "1 rank" : std::to_string(verdict.reported.size()) + " ranks";
  where += " of " + std::to_string(m.world_size);
  if (!verdict.missing.empty()) where += ", missing " + verdict.missing.Fold(16);
  struct Kind {
    const char* stem;
    const char* title;
    const StackTree* tree;
  };
  for (const Kind& k : {Kind{"py_stack", "Python stacks", &m.python}, Kind{"cpp_stack", "Native stacks", &m.native}}) {
    TreeView view = MakeTreeView(m, *k.tree, {.collapse_idle = o.collapse_idle});
    std::string stem = k.stem;
    std::string subtitle = where + "; frame: func@source@ranks_in|ranks_not_in; width: ranks";
    if (view.collapsed_stacks > 0)
      subtitle += "; " + std::to_string(view.collapsed_stacks) + " idle stacks every rank shares are hidden";
    if ((o.formats & kFormatFolded) && !write(stem + ".folded", [&](ByteSink& out) { WriteFolded(view, out); }))
      return false;
    FlameOptions flame{.title = k.title, .subtitle = subtitle};
    if ((o.formats & kFormatSvg) && !write(stem + ".svg", [&](ByteSink& out) { WriteFlameSvg(view, flame, out); }))
      return false;
    if ((o.formats & kFormatSpeedscope) &&
        !write(stem + ".speedscope.json", [&](ByteSink& out) { WriteSpeedscope(view, stem, out); }))
      return false;
    if (o.formats & kFormatDot) {
      // Small (at most dot_max_nodes frames), and Graphviz needs it whole to lay it out.
      StringSink dot;
      WriteCallGraphDot(view, {.max_nodes = o.dot_max_nodes, .title = std::string(k.title) + ", " + where}, dot);
      if (!write_text(stem + ".dot", dot.str())) return false;
      if (o.render_dot) {
        std::string svg, why;
        if (RenderDotToSvg(dot.str(), &svg, &why)) {
          if (!write_text(stem + ".graph.svg", svg)) return false;
        } else {
          result->warnings.push_back(stem + ".graph.svg not written: " + why);
        }
      }
    }
  }
  return write_text("verdict.json", VerdictToJson(verdict));
}

}  // namespace xtimer
