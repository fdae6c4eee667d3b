// The collector's page (status_page.h), rendered from the status object (core_status.h).
#include "collector/status_page.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/xml_escape.h"

namespace xtimer::collector {
namespace {

using J = nlohmann::json;

std::string Esc(std::string_view s) { return XmlEscaped(s); }

// Names the collector made (round folders, merge outputs) are [A-Za-z0-9._-]; anything else
// is percent-encoded all the same.
std::string UrlPart(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

std::string Str(const J& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  return it->dump(-1, ' ', false, J::error_handler_t::replace);
}

int StateOrder(const std::string& s) {
  if (s == "hung") return 0;
  if (s == "stale") return 1;
  if (s == "exited") return 2;
  if (s == "unknown" || s == "registered") return 3;
  return 4;  // running
}

constexpr const char* kStyle = R"(
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.4em;margin:0 0 .3em} h2{font-size:1.15em;margin:1.4em 0 .4em}
table{border-collapse:collapse;background:#fff} td,th{border:1px solid #ddd;padding:2px 8px;text-align:left}
th{background:#eee} .hung{background:#fdd} .stale{background:#ffe9c4} .exited{color:#888}
.summary{font-family:ui-monospace,monospace;white-space:pre-wrap;background:#fff;border:1px solid #ddd;padding:.6em}
.bad{color:#b00;font-weight:bold} .ok{color:#070} .muted{color:#777} ul{margin:.2em 0}
.slow{background:#fdd}
)";

std::string Fixed(const J& j, const char* key, int digits) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return "";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, it->get<double>());
  return buf;
}

std::string UtcTime(const J& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return "";
  double d = it->get<double>();
  if (!(d >= 0 && d < 1e11)) return "";
  time_t secs = static_cast<time_t>(d);
  tm t;
  gmtime_r(&secs, &t);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%SZ", &t);
  return buf;
}

// The slowdown verdict: who is slow, why, since when, what it costs; or the step time when none.
void RenderSlowdown(const J& st, std::string* h) {
  *h += "<h2>Slowdown</h2>\n<div id=\"slowdown\">";
  const J* v = st.contains("slowdown") && st["slowdown"].is_object() ? &st["slowdown"] : nullptr;
  if (v == nullptr || !v->contains("step_time_s") || !(*v)["step_time_s"].is_number()) {
    *h += "<p class=\"muted\">no step records judged yet</p></div>\n";
    return;
  }
  std::string best = Fixed(*v, "baseline_step_time_s", 3);
  std::string steps =
      "step time " + Fixed(*v, "step_time_s", 3) + " s" + (best.empty() ? "" : " (best " + best + " s)");
  const J* slow = v->contains("slow") && (*v)["slow"].is_array() ? &(*v)["slow"] : nullptr;
  if (slow == nullptr || slow->empty()) {
    *h += "<p class=\"ok\">no slowdown: " + Esc(steps) + "</p></div>\n";
    return;
  }
  *h += "<p class=\"bad\">" + std::to_string(slow->size()) + " slowdown" + (slow->size() == 1 ? "" : "s") + ": " +
        Esc(steps) +
        "</p>\n<table id=\"slow\"><tr><th>who</th><th>cause</th><th>scope</th><th>since</th>"
        "<th>score</th><th>cost</th><th>detail</th></tr>\n";
  for (const J& f : *slow) {
    if (!f.is_object()) continue;
    std::string scope = Str(f, "scope"), who;
    if (scope == "rank") who = "rank " + Str(f, "rank") + " (" + Str(f, "node") + ")";
    else if (scope == "node") who = "node " + Str(f, "node");
    else if (scope == "link") who = "link " + Str(f, "node") + " - " + Str(f, "peer");
    else who = "the job";
    std::string cost = Fixed(f, "cost", 2);
    if (!cost.empty()) cost = std::to_string(static_cast<int>(std::lround(f["cost"].get<double>() * 100))) + "%";
    *h += "<tr class=\"slow\" data-cause=\"" + Esc(Str(f, "cause")) + "\"><td>" + Esc(who) + "</td><td>" +
          Esc(Str(f, "cause")) + "</td><td>" + Esc(scope) + "</td><td>" + Esc(UtcTime(f, "since")) + "</td><td>" +
          Esc(Fixed(f, "score", 2)) + "</td><td>" + Esc(cost) + "</td><td>" + Esc(Str(f, "detail")) + "</td></tr>\n";
  }
  *h += "</table></div>\n";
}

// Nodes xtimer_run --evict-slow-nodes evicted: a row each, newest first (nothing when none).
void RenderEvictions(const J& st, std::string* h) {
  const J* ev = st.contains("evictions") && st["evictions"].is_array() ? &st["evictions"] : nullptr;
  if (ev == nullptr || ev->empty()) return;
  *h +=
      "<h2>Nodes evicted as slow</h2>\n<table id=\"evictions\"><tr><th>when</th><th>node</th><th>round</th>"
      "<th>cause</th><th>scope</th><th>cost</th><th>slow since</th><th>named for</th><th>verdict</th></tr>\n";
  for (const J& e : *ev) {
    if (!e.is_object()) continue;
    std::string cost = Fixed(e, "cost", 2);
    if (!cost.empty()) cost = std::to_string(static_cast<int>(std::lround(e["cost"].get<double>() * 100))) + "%";
    std::string node = Str(e, "name"), addr = Str(e, "node");
    if (!addr.empty() && addr != node) node += " (" + addr + ")";
    std::string named = Fixed(e, "named_for_s", 0);
    if (!named.empty()) named += " s";
    *h += "<tr class=\"slow\" data-node=\"" + Esc(Str(e, "name")) + "\"><td>" + Esc(UtcTime(e, "time")) + "</td><td>" +
          Esc(node) + "</td><td>" + Esc(Str(e, "round")) + "</td><td>" + Esc(Str(e, "cause")) + "</td><td>" +
          Esc(Str(e, "scope")) + "</td><td>" + Esc(cost) + "</td><td>" + Esc(UtcTime(e, "since")) + "</td><td>" +
          Esc(named) + "</td><td>" + Esc(Str(e, "reason").empty() ? Str(e, "detail") : Str(e, "reason")) +
          "</td></tr>\n";
  }
  *h += "</table>\n";
}

void RenderRound(const J& r, std::string_view prefix, bool latest, std::string* h) {
  std::string name = Str(r, "name");
  std::string base = std::string(prefix) + UrlPart(name) + "/";
  *h += latest ? "<div id=\"verdict\" data-round=\"" + Esc(name) + "\">" : "<div class=\"round\">";
  *h += "<p><b>" + Esc(name) + "</b> &mdash; hang at " + Esc(Str(r, "hang_time")) + ", started by " +
        Esc(Str(r, "trigger")) + "</p>";
  if (!r.value("finished", false)) {
    *h += "<p>collecting stacks: " + Str(r, "received") + " of " + Str(r, "world_size") +
          " ranks so far, merging in at most " + Str(r, "deadline_in_s") + " s</p></div>";
    return;
  }
  std::string missing = Str(r, "ranks_missing");
  *h += "<p>ranks with stacks: <span class=\"ok\">" + Esc(Str(r, "ranks_reported")) + "</span> (" +
        Str(r, "reported_count") + " of " + Str(r, "world_size") + ")";
  if (!missing.empty())
    *h += "; missing: <span class=\"bad\" id=\"missing\">" + Esc(missing) + "</span>" +
          (r.value("timed_out", false) ? " (no stacks within the wait)" : "");
  *h += "</p>";
  if (r.contains("error")) *h += "<p class=\"bad\">" + Esc(Str(r, "error")) + "</p>";
  if (r.contains("summary") && r["summary"].is_array()) {
    *h += "<div class=\"summary\">";
    for (const J& line : r["summary"])
      if (line.is_string()) *h += Esc(line.get<std::string>()) + "\n";
    *h += "</div>";
  }
  if (r.contains("suspects") && r["suspects"].is_array() && !r["suspects"].empty()) {
    *h += "<p>Suspects:</p><ul class=\"suspects\">";
    for (const J& s : r["suspects"]) *h += "<li>rank " + Esc(Str(s, "rank")) + ": " + Esc(Str(s, "reason")) + "</li>";
    *h += "</ul>";
  }
  if (r.contains("files") && r["files"].is_array()) {
    static const std::pair<const char*, const char*> kLinks[] = {{"py_stack.svg", "Python flame graph"},
                                                                 {"cpp_stack.svg", "native flame graph"},
                                                                 {"py_stack.graph.svg", "Python call graph"},
                                                                 {"cpp_stack.graph.svg", "native call graph"},
                                                                 {"verdict.json", "verdict.json"},
                                                                 {"py_stack.folded", "py_stack.folded"},
                                                                 {"cpp_stack.folded", "cpp_stack.folded"}};
    std::string links;
    for (const auto& [file, label] : kLinks)
      if (std::find(r["files"].begin(), r["files"].end(), J(file)) != r["files"].end())
        links += std::string(links.empty() ? "" : " | ") + "<a href=\"" + Esc(base + file) + "\">" + label + "</a>";
    if (!links.empty()) *h += "<p class=\"links\">" + links + "</p>";
  }
  *h += "</div>";
}

}  // namespace

std::string RenderStatusPage(const J& st, std::string_view prefix) {
  std::string h;
  h += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
       "<meta http-equiv=\"refresh\" content=\"10\"><title>xtimer collector</title><style>";
  h += kStyle;
  h += "</style></head><body>\n<h1>xtimer collector</h1>\n";
  bool hang = st.value("hang_active", false);
  h += "<p id=\"job\">world size " + Str(st, "world_size") + ", " + Str(st, "ranks_known") + " ranks known, " +
       Str(st, "agents_connected") + " agents connected; " +
       (hang ? "<span class=\"bad\">a rank reports a hang</span>" : "<span class=\"ok\">no hang reported</span>") +
       " <span class=\"muted\">(" + Esc(Str(st, "time")) + ")</span></p>\n";

  // Ranks by state.
  h += "<table id=\"states\"><tr><th>state</th><th>ranks</th><th>count</th></tr>";
  if (st.contains("states") && st["states"].is_object())
    for (const auto& [state, v] : st["states"].items())
      h += "<tr class=\"" + Esc(state) + "\"><td>" + Esc(state) + "</td><td>" + Esc(Str(v, "ranks")) + "</td><td>" +
           Esc(Str(v, "count")) + "</td></tr>";
  h += "</table>\n";

  RenderSlowdown(st, &h);
  RenderEvictions(st, &h);

  // The latest verdict, then older rounds.
  h += "<h2>Latest verdict</h2>\n";
  const J* rounds = st.contains("rounds") && st["rounds"].is_array() ? &st["rounds"] : nullptr;
  const J* latest = nullptr;
  if (rounds)
    for (const J& r : *rounds)
      if (r.value("finished", false)) {
        latest = &r;
        break;
      }
  if (rounds)
    for (const J& r : *rounds)
      if (!r.value("finished", false)) RenderRound(r, prefix, false, &h);
  if (latest) RenderRound(*latest, prefix, true, &h);
  else h += "<p id=\"verdict\" class=\"muted\">no dump round has finished yet</p>\n";
  if (rounds && rounds->size() > 1) {
    h += "<h2>Earlier rounds</h2><ul>";
    for (const J& r : *rounds) {
      if (&r == latest || !r.value("finished", false)) continue;
      std::string name = Str(r, "name");
      h += "<li>" + Esc(name) + ": " + Esc(Str(r, "trigger")) +
           "; missing: " + Esc(Str(r, "ranks_missing").empty() ? "none" : Str(r, "ranks_missing"));
      if (r.contains("files") && std::find(r["files"].begin(), r["files"].end(), J("py_stack.svg")) != r["files"].end())
        h += " &mdash; <a href=\"" + Esc(std::string(prefix) + UrlPart(name) + "/py_stack.svg") +
             "\">Python flame graph</a>";
      h += "</li>";
    }
    h += "</ul>\n";
  }

  // Ranks: the ones in trouble first; at most kRows rows.
  constexpr size_t kRows = 1000;
  std::vector<const J*> rows;
  if (st.contains("ranks") && st["ranks"].is_array())
    for (const J& r : st["ranks"]) rows.push_back(&r);
  auto state_of = [](const J& r) {
    return r.value("stale", false) && Str(r, "state") != "exited" ? std::string("stale") : Str(r, "state");
  };
  std::stable_sort(rows.begin(), rows.end(),
                   [&](const J* a, const J* b) { return StateOrder(state_of(*a)) < StateOrder(state_of(*b)); });
  h += "<h2>Ranks</h2>\n<table id=\"ranks\"><tr><th>rank</th><th>host</th><th>local</th><th>pid</th><th>state</th>"
       "<th>last report</th><th>oldest op in flight</th><th>trigger</th><th>dumps</th><th>step (s)</th>"
       "<th>slow score</th></tr>\n";
  for (size_t i = 0; i < rows.size() && i < kRows; ++i) {
    const J& r = *rows[i];
    std::string state = state_of(r);
    std::string op = Str(r, "oldest_inflight_op");
    if (!op.empty()) op += " (" + Str(r, "oldest_inflight_s") + " s)";
    std::string last = Str(r, "last_report");
    if (!last.empty()) last += " (" + Str(r, "last_report_age_s") + " s ago)";
    h += "<tr class=\"" + Esc(state) + "\" data-rank=\"" + Esc(Str(r, "rank")) + "\"><td>" + Esc(Str(r, "rank")) +
         "</td><td>" + Esc(Str(r, "host")) + "</td><td>" + Esc(Str(r, "local_rank")) + "</td><td>" +
         Esc(Str(r, "pid")) + "</td><td>" + Esc(state) + "</td><td>" + Esc(last) + "</td><td>" + Esc(op) + "</td><td>" +
         Esc(Str(r, "trigger")) + "</td><td>" + Esc(Str(r, "dumps")) + "</td><td>" + Esc(Fixed(r, "step_time_s", 3)) +
         "</td><td>" + Esc(Fixed(r, "slow_score", 2) + (r.contains("slow_cause") ? " " + Str(r, "slow_cause") : "")) +
         "</td></tr>\n";
  }
  h += "</table>\n";
  if (rows.size() > kRows)
    h += "<p class=\"muted\">" + std::to_string(rows.size() - kRows) +
         " more ranks (all running) are not listed; status.json has every rank.</p>\n";
  h += "<p class=\"muted\"><a href=\"metrics\">/metrics</a> | <a href=\"status.json\">status.json</a></p>\n";
  h += "</body></html>\n";
  return h;
}

}  // namespace xtimer::collector
