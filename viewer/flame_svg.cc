#include "viewer/flame_svg.h"

#include <cstdio>
#include <functional>

#include "common/xml_escape.h"
#include "viewer/frame_label.h"

namespace xtimer {
namespace {

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// The kind's colour, lighter or darker by a stable hash of the name so neighbours differ.
std::string FrameColor(FrameKind kind, std::string_view name) {
  unsigned rgb = 0;
  std::sscanf(FrameKindColor(kind) + 1, "%x", &rgb);
  int shift = static_cast<int>(std::hash<std::string_view>()(name) % 41) - 20;
  auto ch = [&](int c) { return std::max(0, std::min(255, c + shift)); };
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", ch((rgb >> 16) & 255), ch((rgb >> 8) & 255), ch(rgb & 255));
  return buf;
}

// The text that fits in a frame of this width (12px sans-serif, about 7 px per character).
std::string FitText(std::string_view label, double width) {
  size_t fit = width < 21 ? 0 : static_cast<size_t>((width - 4) / 7.0);
  if (fit < 3) return "";
  if (label.size() <= fit) return std::string(label);
  size_t cut = fit - 2;
  while (cut > 0 && (static_cast<unsigned char>(label[cut]) & 0xC0) == 0x80) --cut;  // whole UTF-8 chars
  return std::string(label.substr(0, cut)) + "..";
}

constexpr const char* kStyle = R"(
text { font-family: Verdana, 'DejaVu Sans', sans-serif; font-size: 12px; fill: #000; }
#title { font-size: 17px; }
.f rect { stroke-width: 0; }
.f.split rect { stroke: #222; stroke-width: 1; }
.f:hover rect { stroke: #000; stroke-width: 1.5; }
.f text { pointer-events: none; }
.f.hide { display: none; }
.f.parent rect { opacity: 0.55; }
.f.match rect { fill: #e040fb !important; }
#tooltip rect { fill: #ffffe8; stroke: #555; }
#tooltip text { font-size: 12px; }
.button { cursor: pointer; fill: #0645ad; }
.button.off { visibility: hidden; }
input#search { font: 12px sans-serif; width: 210px; }
)";

// Written for this tool: zoom keeps a frame's own x/width in data attributes and recomputes all
// frames relative to the clicked one; text is re-fitted after every zoom.
constexpr const char* kScript = R"(
"use strict";
var svg, frames, tooltip, tipText, tipRect, details, matched, unzoomBtn, W, PAD, zoomed = null;
function init() {
  svg = document.documentElement;
  W = +svg.getAttribute("data-width"); PAD = +svg.getAttribute("data-pad");
  frames = Array.prototype.slice.call(document.querySelectorAll("g.f"));
  tooltip = document.getElementById("tooltip"); tipText = tooltip.querySelector("text");
  tipRect = tooltip.querySelector("rect"); details = document.getElementById("details");
  matched = document.getElementById("matched"); unzoomBtn = document.getElementById("unzoom");
  frames.forEach(function (g) {
    var r = g.querySelector("rect");
    g.dataset.fx = r.getAttribute("x"); g.dataset.fw = r.getAttribute("width");
    g.addEventListener("mouseover", function (e) { show(g, e); });
    g.addEventListener("mousemove", move);
    g.addEventListener("mouseout", hide);
    g.addEventListener("click", function (e) { e.stopPropagation(); zoom(g); });
  });
  document.getElementById("background").addEventListener("click", unzoom);
  unzoomBtn.addEventListener("click", unzoom);
  var input = document.getElementById("search");
  if (input) input.addEventListener("input", function () { search(input.value); });
  document.addEventListener("keydown", function (e) {
    if (e.key === "Escape") { unzoom(); if (input) { input.value = ""; search(""); } }
  });
  // A link can carry a view: #s=REGEX searches, #z=TEXT zooms into the first frame containing TEXT.
  location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
    var i = kv.indexOf("="); if (i < 0) return;
    var k = kv.substring(0, i), val = decodeURIComponent(kv.substring(i + 1));
    if (k === "s") { if (input) input.value = val; search(val); }
    if (k === "z") { var g = frames.find(function (f) { return label(f).indexOf(val) >= 0; }); if (g) zoom(g); }
  });
  svg.setAttribute("data-ready", "1");
}
function label(g) { return g.querySelector("title").textContent; }
function show(g, e) {
  var t = label(g); details.textContent = t; tipText.textContent = t;
  tooltip.setAttribute("visibility", "visible"); move(e);
}
function move(e) {
  var p = svg.createSVGPoint(); p.x = e.clientX; p.y = e.clientY;
  var m = svg.getScreenCTM(); if (m) p = p.matrixTransform(m.inverse());
  var w = tipText.getComputedTextLength() + 10;
  var x = Math.min(p.x + 12, W - w - 2); if (x < 2) x = 2;
  tipRect.setAttribute("width", w); tipRect.setAttribute("x", x); tipRect.setAttribute("y", p.y + 14);
  tipText.setAttribute("x", x + 5); tipText.setAttribute("y", p.y + 28);
}
function hide() { tooltip.setAttribute("visibility", "hidden"); details.textContent = " "; }
function fit(g, w) {
  var t = g.querySelector("text"), l = label(g).replace(/ \(\d+ ranks?, \d+ threads?\)$/, ""), n = Math.floor((w - 4) / 7);
  if (w < 21 || n < 3) { t.textContent = ""; return; }
  t.textContent = l.length <= n ? l : l.substring(0, n - 2) + "..";
}
function place(g, x, w) {
  var r = g.querySelector("rect"); r.setAttribute("x", x); r.setAttribute("width", w);
  g.querySelector("text").setAttribute("x", x + 3); fit(g, w);
}
function zoom(target) {
  var x0 = +target.dataset.fx, w0 = +target.dataset.fw, y0 = +target.querySelector("rect").getAttribute("y");
  var scale = (W - 2 * PAD) / w0;
  frames.forEach(function (g) {
    var x = +g.dataset.fx, w = +g.dataset.fw, y = +g.querySelector("rect").getAttribute("y");
    g.classList.remove("hide", "parent");
    if (y <= y0 && x >= x0 - 0.01 && x + w <= x0 + w0 + 0.01) {
      var nw = w * scale; if (nw < 0.1) { g.classList.add("hide"); return; }
      place(g, PAD + (x - x0) * scale, nw);
    } else if (y > y0 && x <= x0 + 0.01 && x + w >= x0 + w0 - 0.01) {
      g.classList.add("parent"); place(g, PAD, W - 2 * PAD);
    } else {
      g.classList.add("hide");
    }
  });
  zoomed = target; unzoomBtn.classList.remove("off");
}
function unzoom() {
  if (!zoomed) return;
  frames.forEach(function (g) { g.classList.remove("hide", "parent"); place(g, +g.dataset.fx, +g.dataset.fw); });
  zoomed = null; unzoomBtn.classList.add("off");
}
function search(term) {
  var re = null;
  if (term) { try { re = new RegExp(term, "i"); } catch (e) { re = null; } }
  var covered = 0, total = W - 2 * PAD, spans = [];
  frames.forEach(function (g) {
    var hit = re !== null && re.test(label(g));
    g.classList.toggle("match", hit);
    if (hit) spans.push([+g.dataset.fx, +g.dataset.fx + +g.dataset.fw]);
  });
  spans.sort(function (a, b) { return a[0] - b[0]; });
  var end = -1;
  spans.forEach(function (s) {
    if (s[1] <= end) return;
    covered += s[1] - Math.max(s[0], end); end = s[1];
  });
  matched.textContent = re ? "Matched: " + (100 * covered / total).toFixed(1) + "%" : " ";
}
window.addEventListener("load", init);
)";

}  // namespace

void WriteFlameSvg(const TreeView& v, const FlameOptions& o, ByteSink& out) {
  const StackTree& tree = *v.tree;
  const double pad = 10, header = 72, footer = 30, fh = o.frame_height;
  const double usable = o.width - 2 * pad;
  const uint64_t total = v.total[StackTree::kRoot];

  // Position of every drawn node: x from the parent's x plus the earlier siblings' widths.
  std::vector<double> x(tree.size(), 0), w(tree.size(), 0);
  std::vector<uint32_t> drawn;
  uint32_t max_depth = 0;
  if (total > 0) {
    std::vector<uint32_t> stack = {StackTree::kRoot};
    x[StackTree::kRoot] = pad;
    w[StackTree::kRoot] = usable;
    while (!stack.empty()) {
      uint32_t n = stack.back();
      stack.pop_back();
      const TreeNode& node = tree.node(n);
      double cx = x[n];
      for (uint32_t c : node.children) {
        double cw = usable * static_cast<double>(v.total[c]) / static_cast<double>(total);
        x[c] = cx;
        w[c] = cw;
        cx += cw;
        if (cw < 0.1 || tree.node(c).depth > static_cast<uint32_t>(o.max_depth)) continue;  // invisible
        drawn.push_back(c);
        max_depth = std::max(max_depth, tree.node(c).depth);
        stack.push_back(c);
      }
    }
  }
  const double height = header + (max_depth + 1) * fh + footer;

  out << "<?xml version=\"1.0\" standalone=\"no\"?>\n";
  out << "<svg version=\"1.1\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << o.width << "\" height=\""
      << Num(height) << "\" viewBox=\"0 0 " << o.width << " " << Num(height) << "\" data-width=\"" << o.width
      << "\" data-pad=\"" << Num(pad) << "\">\n";
  out << "<style>" << kStyle << "</style>\n<script type=\"text/ecmascript\"><![CDATA[" << kScript << "]]></script>\n";
  out << "<rect id=\"background\" x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"#f4f4f0\"/>\n";
  out << "<text id=\"title\" x=\"" << Num(o.width / 2.0) << "\" y=\"22\" text-anchor=\"middle\">";
  WriteXmlEscaped(out, PrintableName(o.title));
  out << "</text>\n<text id=\"subtitle\" x=\"" << Num(o.width / 2.0) << "\" y=\"40\" text-anchor=\"middle\">";
  WriteXmlEscaped(out, PrintableName(o.subtitle, 400));
  out << "</text>\n";
  out << "<text id=\"unzoom\" class=\"button off\" x=\"" << Num(pad) << "\" y=\"22\">Reset zoom</text>\n";
  out << "<foreignObject id=\"searchbox\" x=\"" << Num(o.width - pad - 240)
      << "\" y=\"6\" width=\"240\" height=\"26\"><input xmlns=\"http://www.w3.org/1999/xhtml\" id=\"search\" "
         "type=\"search\" placeholder=\"search (regular expression)\"/></foreignObject>\n";
  out << "<text id=\"matched\" x=\"" << Num(o.width - pad) << "\" y=\"50\" text-anchor=\"end\"> </text>\n";
  // Legend: one swatch per kind.
  double lx = pad;
  for (int k = 0; k < kFrameKindCount; ++k) {
    FrameKind kind = static_cast<FrameKind>(k);
    out << "<rect x=\"" << Num(lx) << "\" y=\"48\" width=\"12\" height=\"12\" fill=\"" << FrameKindColor(kind)
        << "\"/>";
    out << "<text x=\"" << Num(lx + 16) << "\" y=\"58\">" << FrameKindName(kind) << "</text>\n";
    lx += 78;
  }
  if (total == 0) {
    out << "<text x=\"" << Num(o.width / 2.0) << "\" y=\"" << Num(header + 20)
        << "\" text-anchor=\"middle\">no stacks of this kind</text>\n";
  }
  out << "<g id=\"frames\">\n";
  const double base = height - footer;  // bottom edge of the root row
  for (uint32_t n : drawn) {
    const TreeNode& node = tree.node(n);
    const FrameInfo& f = v.merged->frames[node.frame];
    double y = base - node.depth * fh;
    out << (v.split[n] ? "<g class=\"f split\"><title>" : "<g class=\"f\"><title>");
    const std::string label = v.Label(n);
    WriteXmlEscaped(out, label);
    out << " (" << node.ranks.size() << (node.ranks.size() == 1 ? " rank, " : " ranks, ") << node.threads
        << (node.threads == 1 ? " thread)" : " threads)");
    out << "</title><rect x=\"" << Num(x[n]) << "\" y=\"" << Num(y) << "\" width=\"" << Num(w[n]) << "\" height=\""
        << Num(fh - 1) << "\" rx=\"2\" fill=\"" << FrameColor(f.kind, f.function) << "\"/><text x=\"" << Num(x[n] + 3)
        << "\" y=\"" << Num(y + fh - 4.5) << "\">";
    WriteXmlEscaped(out, FitText(label, w[n]));
    out << "</text></g>\n";
  }
  out << "</g>\n";
  out << "<text id=\"details\" x=\"" << Num(pad) << "\" y=\"" << Num(height - 10) << "\"> </text>\n";
  out << "<g id=\"tooltip\" visibility=\"hidden\" pointer-events=\"none\"><rect x=\"0\" y=\"0\" width=\"10\" "
         "height=\"20\" rx=\"3\"/><text x=\"0\" y=\"0\"> </text></g>\n";
  out << "</svg>\n";
}

}  // namespace xtimer
