#include "slowdown/slowdown_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "common/clock.h"
#include "common/xml_escape.h"
#include "slowdown/robust_stats.h"

namespace xtimer {
namespace {

constexpr double kWidth = 1100, kLeft = 70, kRight = 30, kTop = 50;
constexpr double kStepHeight = 300, kGap = 50, kScoreHeight = 200;
constexpr const char* kColors[] = {"#d62728", "#1f77b4", "#ff7f0e", "#2ca02c",
                                   "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::string F(double v, int digits = 1) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// A "nice" tick step for a span: 1, 2 or 5 times a power of ten, about `want` ticks.
double TickStep(double span, int want) {
  if (!(span > 0)) return 1;
  double raw = span / want, p = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

struct Panel {
  double top, height, lo, hi;
  double Y(double v) const { return top + height - (std::clamp(v, lo, hi) - lo) / (hi - lo) * height; }
};

}  // namespace

std::string SlowdownSvg(const SlowdownReplay& r, double threshold, const std::string& title) {
  const double plot_w = kWidth - kLeft - kRight;
  const size_t n = r.t.size();
  const double t0 = n > 0 ? std::min(r.start, r.t.front()) : 0, t1 = n > 0 ? std::max(r.t.back(), t0 + 1) : t0 + 1;
  auto X = [&](double t) { return kLeft + (t - t0) / (t1 - t0) * plot_w; };

  // Ranks a slowdown named, with their colours.
  std::map<int32_t, const char*> named;
  for (const SlowdownEpisode& e : r.episodes)
    for (int32_t rank : e.finding.ranks)
      if (!named.contains(rank)) named[rank] = kColors[named.size() % std::size(kColors)];

  // Scales: step time up to four times the job's median (a checkpoint-like spike is clipped).
  std::vector<double> jobs;
  double top_step = 0;
  for (double v : r.job_step)
    if (v > 0) jobs.push_back(v);
  const double typical = jobs.empty() ? 1 : slowdown::MedianOf(jobs);
  for (const auto& [rank, s] : r.ranks)
    for (double v : s.step)
      if (std::isfinite(v)) top_step = std::max(top_step, v);
  const Panel steps{kTop, kStepHeight, 0, std::max(1e-3, std::min(top_step, 4 * typical) * 1.1)};
  const Panel scores{kTop + kStepHeight + kGap, kScoreHeight, 0, 1.3};
  const double height = scores.top + scores.height + 60 + 34.0 * r.episodes.size() + 18;

  std::string s;
  s += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + F(kWidth, 0) +
       "\" height=\"" + F(height, 0) + "\" viewBox=\"0 0 " + F(kWidth, 0) + " " + F(height, 0) +
       "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  s += "<text x=\"" + F(kLeft, 0) + "\" y=\"22\" font-size=\"16\" font-weight=\"bold\">" + XmlEscaped(title) +
       "</text>\n";
  if (n == 0) {
    s += "<text x=\"" + F(kLeft, 0) + "\" y=\"" + F(kTop + 20, 0) +
         "\">No window was judged: fewer than 3 steps per rank after the first 5.</text>\n</svg>\n";
    return s;
  }
  s += "<text x=\"" + F(kLeft, 0) + "\" y=\"40\" fill=\"#555\">" +
       XmlEscaped("seconds since " + IsoUtc(static_cast<uint64_t>(std::max(0.0, t0) * 1e9)) + "; " +
                  std::to_string(r.ranks.size()) + " ranks, " + std::to_string(r.episodes.size()) + " slowdown" +
                  (r.episodes.size() == 1 ? "" : "s")) +
       "</text>\n";

  // Slowdowns: shaded from onset to end over both panels, the onset marked and labelled.
  for (size_t i = 0; i < r.episodes.size(); ++i) {
    const SlowdownEpisode& e = r.episodes[i];
    double x0 = X(std::max(e.since, t0)), x1 = X(std::min(std::max(e.until, e.since), t1));
    s += "<rect x=\"" + F(x0) + "\" y=\"" + F(kTop) + "\" width=\"" + F(std::max(1.0, x1 - x0)) + "\" height=\"" +
         F(scores.top + scores.height - kTop) + "\" fill=\"#d62728\" fill-opacity=\"0.10\"/>\n";
    s += "<line x1=\"" + F(x0) + "\" x2=\"" + F(x0) + "\" y1=\"" + F(kTop) + "\" y2=\"" +
         F(scores.top + scores.height) + "\" stroke=\"#d62728\" stroke-dasharray=\"4 3\"/>\n";
    std::string who = e.finding.scope == slowdown::Scope::kRank   ? "rank " + std::to_string(e.finding.rank)
                      : e.finding.scope == slowdown::Scope::kNode ? "node " + e.finding.node
                      : e.finding.scope == slowdown::Scope::kLink ? "link " + e.finding.node + "-" + e.finding.peer
                                                                  : "job";
    s += "<text x=\"" + F(x0 + 3) + "\" y=\"" + F(kTop + 14 + 14.0 * (i % 4)) + "\" fill=\"#d62728\">" +
         XmlEscaped(who + " " + slowdown::CauseName(e.finding.cause)) + "</text>\n";
  }

  auto axes = [&](const Panel& p, const std::string& label, int digits) {
    s += "<rect x=\"" + F(kLeft) + "\" y=\"" + F(p.top) + "\" width=\"" + F(plot_w) + "\" height=\"" + F(p.height) +
         "\" fill=\"none\" stroke=\"#999\"/>\n";
    double step = TickStep(p.hi - p.lo, 5);
    for (double v = p.lo; v <= p.hi + 1e-12; v += step) {
      s += "<line x1=\"" + F(kLeft) + "\" x2=\"" + F(kLeft + plot_w) + "\" y1=\"" + F(p.Y(v)) + "\" y2=\"" + F(p.Y(v)) +
           "\" stroke=\"#eee\"/>\n<text x=\"" + F(kLeft - 6) + "\" y=\"" + F(p.Y(v) + 4) +
           "\" text-anchor=\"end\" fill=\"#555\">" + F(v, digits) + "</text>\n";
    }
    double ts = TickStep(t1 - t0, 10);
    for (double v = 0; v <= t1 - t0 + 1e-9; v += ts)
      s += "<text x=\"" + F(X(t0 + v)) + "\" y=\"" + F(p.top + p.height + 14) +
           "\" text-anchor=\"middle\" fill=\"#555\">" + F(v, ts < 1 ? 1 : 0) + "</text>\n";
    s += "<text x=\"" + F(14) + "\" y=\"" + F(p.top + p.height / 2) + "\" transform=\"rotate(-90 14 " +
         F(p.top + p.height / 2) + ")\" text-anchor=\"middle\">" + XmlEscaped(label) + "</text>\n";
  };
  axes(steps, "step time (s)", steps.hi < 0.1 ? 3 : 2);
  axes(scores, "score (rate / peers')", 1);
  s += "<line x1=\"" + F(kLeft) + "\" x2=\"" + F(kLeft + plot_w) + "\" y1=\"" + F(scores.Y(threshold)) + "\" y2=\"" +
       F(scores.Y(threshold)) + "\" stroke=\"#d62728\" stroke-dasharray=\"6 4\"/>\n<text x=\"" + F(kLeft + plot_w - 4) +
       "\" y=\"" + F(scores.Y(threshold) - 4) + "\" text-anchor=\"end\" fill=\"#d62728\">threshold " + F(threshold, 2) +
       "</text>\n";

  // The others' band (lowest to highest) in a panel, and a polyline per series.
  auto band = [&](const Panel& p, bool score) {
    std::string upper, lower;
    for (size_t i = 0; i < n; ++i) {
      double lo = INFINITY, hi = -INFINITY;
      for (const auto& [rank, ser] : r.ranks) {
        if (score && named.contains(rank)) continue;
        double v = score ? ser.score[i] : ser.step[i];
        if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
      }
      if (!std::isfinite(lo)) continue;
      upper += F(X(r.t[i])) + "," + F(p.Y(hi)) + " ";
      lower = F(X(r.t[i])) + "," + F(p.Y(lo)) + " " + lower;
    }
    if (!upper.empty()) s += "<polygon points=\"" + upper + lower + "\" fill=\"#bbb\" fill-opacity=\"0.6\"/>\n";
  };
  auto line = [&](const Panel& p, const std::vector<double>& v, const char* color, double width,
                  const std::string& tip) {
    std::string pts;
    auto flush = [&] {
      if (pts.empty()) return;
      s += "<polyline points=\"" + pts + "\" fill=\"none\" stroke=\"" + color + "\" stroke-width=\"" + F(width) +
           "\"><title>" + XmlEscaped(tip) + "</title></polyline>\n";
      pts.clear();
    };
    for (size_t i = 0; i < n && i < v.size(); ++i) {
      if (!std::isfinite(v[i])) {
        flush();
        continue;
      }
      pts += F(X(r.t[i])) + "," + F(p.Y(v[i])) + " ";
    }
    flush();
  };
  band(steps, false);
  band(scores, true);
  line(steps, r.job_step, "#000000", 1.5, "the job's step time (median over ranks)");
  for (const auto& [rank, color] : named) {
    auto it = r.ranks.find(rank);
    if (it == r.ranks.end()) continue;
    std::string node = r.node_of.contains(rank) ? " (" + r.node_of.at(rank) + ")" : "";
    line(steps, it->second.step, color, 2, "rank " + std::to_string(rank) + node);
    line(scores, it->second.score, color, 2, "rank " + std::to_string(rank) + node);
  }

  // Legend and the list of slowdowns.
  double y = scores.top + scores.height + 36;
  s += "<text x=\"" + F(kLeft) + "\" y=\"" + F(y) + "\" fill=\"#555\">grey: every rank (lowest to highest); black: " +
       "the job's step time; coloured: ranks a slowdown named; shaded: a slowdown, from its onset</text>\n";
  for (const SlowdownEpisode& e : r.episodes) {
    y += 18;
    const slowdown::Finding& f = e.finding;
    std::string text =
        (f.scope == slowdown::Scope::kRank ? "rank " + std::to_string(f.rank) + " (" + f.node + ")"
         : f.scope == slowdown::Scope::kJob
             ? std::string("the job")
             : std::string(slowdown::ScopeName(f.scope)) + " " + f.node + (f.peer.empty() ? "" : " - " + f.peer)) +
        ": " + slowdown::CauseName(f.cause) + " from " + F(e.since - t0) + " s for " + F(e.until - e.since, 0) + " s" +
        (e.ended ? "" : " (still at the end)") + ", cost about " + F(e.cost_s) + " s of the job's time";
    const char* color = f.ranks.empty() || !named.contains(f.ranks.front()) ? "#d62728" : named[f.ranks.front()];
    s += "<text x=\"" + F(kLeft) + "\" y=\"" + F(y) + "\" fill=\"" + color + "\">" + XmlEscaped(text) + "</text>\n";
    y += 16;
    s += "<text x=\"" + F(kLeft + 16) + "\" y=\"" + F(y) + "\" fill=\"#333\">" + XmlEscaped(f.detail) + "</text>\n";
  }
  s += "</svg>\n";
  return s;
}

}  // namespace xtimer
