#include "netprobe/report.h"

#include <sys/time.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <ctime>

namespace xtimer::netprobe {
namespace {

using nlohmann::json;

json Num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

double Round3(double v) { return std::round(v * 1000) / 1000; }

json TestJson(const TestResult& t, double reference, const JudgeConfig& c) {
  json j = {{"nodes", {t.a, t.b}}, {"step", t.step}, {"completed", t.completed}};
  std::string bad = BadReason(t, reference, c);
  j["result"] = bad.empty() ? "good" : "bad";
  if (!bad.empty()) j["reason"] = bad;
  if (t.completed) {
    j["time_s"] = Num(t.time_s);
    j["fwd_mbps"] = Num(Round3(t.fwd_mbps));
    j["bwd_mbps"] = Num(Round3(t.bwd_mbps));
    j["latency_us"] = Num(Round3(t.latency_us));
    if (t.stopped) j["stopped"] = t.stop_note;
  } else {
    j["error"] = t.error;
  }
  if (!t.extra.empty()) {
    json e = json::object();
    for (const auto& [k, v] : t.extra) e[k] = Num(v);
    j["extra"] = e;
  }
  return j;
}

// Never-throwing readers for rendering.
double GetNum(const json& j, const char* key, double def = NAN) {
  if (!j.is_object()) return def;
  auto it = j.find(key);
  return (it != j.end() && it->is_number()) ? it->get<double>() : def;
}
std::string GetStr(const json& j, const char* key, const std::string& def = "") {
  if (!j.is_object()) return def;
  auto it = j.find(key);
  return (it != j.end() && it->is_string()) ? it->get<std::string>() : def;
}
bool GetBool(const json& j, const char* key, bool def) {
  if (!j.is_object()) return def;
  auto it = j.find(key);
  return (it != j.end() && it->is_boolean()) ? it->get<bool>() : def;
}
const json& GetArr(const json& j, const char* key) {
  static const json empty = json::array();
  if (!j.is_object()) return empty;
  auto it = j.find(key);
  return (it != j.end() && it->is_array()) ? *it : empty;
}
std::string PairName(const json& nodes) {
  if (!nodes.is_array() || nodes.size() != 2 || !nodes[0].is_number_integer() || !nodes[1].is_number_integer())
    return "?";
  return std::to_string(nodes[0].get<long long>()) + "-" + std::to_string(nodes[1].get<long long>());
}

std::string Printf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Printf(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

std::string FormatSeconds(double s) {
  if (!std::isfinite(s)) return "-";
  if (s < 1e-3) return Printf("%.0f us", s * 1e6);
  if (s < 1) return Printf("%.1f ms", s * 1e3);
  return Printf("%.2f s", s);
}

std::string FormatUs(double us) {
  if (!std::isfinite(us)) return "-";
  if (us < 1000) return Printf("%.0f us", us);
  return Printf("%.1f ms", us / 1000);
}

}  // namespace

std::string FormatMbps(double mbps) {
  if (!std::isfinite(mbps)) return "-";
  if (mbps >= 1000) return Printf("%.2f GB/s", mbps / 1000);
  if (mbps >= 100) return Printf("%.0f MB/s", mbps);
  if (mbps >= 10) return Printf("%.1f MB/s", mbps);
  return Printf("%.2f MB/s", mbps);
}

std::string UtcNow() {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  tm t{};
  gmtime_r(&tv.tv_sec, &t);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday,
                t.tm_hour, t.tm_min, t.tm_sec, static_cast<int>(tv.tv_usec / 1000));
  return buf;
}

JudgeConfig ConfigOf(const Options& o) {
  JudgeConfig c;
  c.straggler_factor = o.straggler_factor;
  c.min_bandwidth_mbps = o.min_bandwidth_mbps;
  return c;
}

json BuildReport(const ReportInput& in) {
  const Options& o = in.options;
  const JudgeConfig config = ConfigOf(o);
  const Verdict& v = in.verdict;
  json r;
  r["format"] = kReportFormat;
  r["version"] = kReportVersion;
  r["time"] = UtcNow();
  bool failed = !in.error.empty();
  r["healthy"] = !failed && v.healthy();
  r["exit_code"] = failed ? 2 : (v.healthy() ? 0 : 1);
  if (failed) r["error"] = in.error;
  r["backend"] = Name(o.backend);
  r["nnodes"] = o.nnodes;
  r["size"] = o.size;
  if (o.backend == Backend::kTcp) r["streams"] = o.streams;
  r["straggler_factor"] = o.straggler_factor;
  r["min_bandwidth_mbps"] = o.min_bandwidth_mbps > 0 ? json(o.min_bandwidth_mbps) : json(nullptr);
  r["timeout_s"] = o.timeout_s;
  if (o.backend == Backend::kTcp) r["connect_timeout_s"] = std::min(o.connect_timeout_s, o.timeout_s);
  r["all_pairs"] = o.all_pairs;
  r["max_rounds"] = o.max_rounds > 0 ? json(o.max_rounds) : json("auto");
  r["probe_time_s"] = Round3(in.probe_time_s);
  r["reference_time_s"] = v.reference_time_s > 0 ? json(v.reference_time_s) : json(nullptr);

  json summary = {{"ok", 0}, {"straggler", 0}, {"faulty", 0}, {"missing", 0}, {"bad_links", 0}, {"undecided_links", 0}};
  json nodes = json::array();
  for (const NodeVerdict& n : v.nodes) {
    json j = {{"rank", n.rank}, {"status", Name(n.status)}, {"decided", n.decided}};
    if (n.rank < static_cast<int>(in.info.size())) {
      j["host"] = in.info[n.rank].host;
      j["addr"] = in.info[n.rank].addr;
    }
    if (!n.reason.empty()) j["reason"] = n.reason;
    j["tests"] = n.tests;
    j["time_s"] = n.tested ? Num(n.time_s) : json(nullptr);
    j["bandwidth_mbps"] = n.tested ? Num(Round3(n.bandwidth_mbps)) : json(nullptr);
    j["latency_us"] = n.tested ? Num(Round3(n.latency_us)) : json(nullptr);
    j["good_partners"] = n.good_partners;
    j["bad_partners"] = n.bad_partners;
    if (n.rank < static_cast<int>(in.inputs.size()) && in.inputs[n.rank].local.ran) {
      const LocalResult& l = in.inputs[n.rank].local;
      json lj = {{"ok", l.ok}};
      if (!l.ok) lj["error"] = l.error;
      json gpus = json::array();
      for (const auto& [gpu, mbps] : l.h2d_mbps) gpus.push_back({{"gpu", gpu}, {"h2d_mbps", Num(Round3(mbps))}});
      lj["gpus"] = gpus;
      json pairs = json::array();
      for (const LocalResult::Pair& p : l.pairs) {
        bool below = o.min_bandwidth_mbps > 0 && p.mbps < o.min_bandwidth_mbps;
        pairs.push_back({{"src", p.src},
                         {"dst", p.dst},
                         {"mbps", Num(Round3(p.mbps))},
                         {"peer_access", p.peer_access},
                         {"ok", !below}});
      }
      lj["pairs"] = pairs;
      j["local"] = lj;
    }
    const char* s = Name(n.status);
    if (summary.contains(s)) summary[s] = summary[s].get<int>() + 1;
    nodes.push_back(j);
  }
  json links = json::array();
  for (const LinkVerdict& l : v.links) {
    json j = {{"nodes", {l.a, l.b}}, {"status", Name(l.status)}};
    if (!l.reason.empty()) j["reason"] = l.reason;
    if (l.test >= 0 && l.test < static_cast<int>(in.tests.size())) {
      const TestResult& t = in.tests[l.test];
      j["round"] = t.round;
      json tj = TestJson(t, v.reference_time_s, config);
      for (const char* k : {"completed", "time_s", "fwd_mbps", "bwd_mbps", "latency_us", "stopped", "error", "extra"})
        if (tj.contains(k)) j[k] = tj[k];
    }
    if (l.status == LinkStatus::kBad) summary["bad_links"] = summary["bad_links"].get<int>() + 1;
    if (l.status == LinkStatus::kUndecided) summary["undecided_links"] = summary["undecided_links"].get<int>() + 1;
    links.push_back(j);
  }
  json rounds = json::array();
  for (const RoundRecord& rr : in.rounds) {
    json steps = json::array();
    for (const Step& s : rr.plan.steps) {
      json sj = json::array();
      for (const Pair& p : s) sj.push_back({p.first, p.second});
      steps.push_back(sj);
    }
    json tests = json::array();
    for (int i : rr.tests)
      if (i >= 0 && i < static_cast<int>(in.tests.size()))
        tests.push_back(TestJson(in.tests[i], v.reference_time_s, config));
    rounds.push_back({{"round", rr.round},
                      {"kind", rr.plan.kind},
                      {"elapsed_s", Round3(rr.elapsed_s)},
                      {"steps", steps},
                      {"tests", tests}});
  }
  r["summary"] = summary;
  r["nodes"] = nodes;
  r["links"] = links;
  r["rounds"] = rounds;
  return r;
}

int ExitCodeOf(const json& report) {
  if (!report.is_object()) return 2;
  auto it = report.find("exit_code");
  if (it == report.end() || !it->is_number_integer()) return 2;
  int code = it->get<int>();
  return code == 0 || code == 1 ? code : 2;
}

std::string RenderTable(const json& r) {
  std::string out;
  int code = ExitCodeOf(r);
  const json& rounds = GetArr(r, "rounds");
  out += Printf("xtimer_netprobe: %d nodes, %s backend, %zu round%s, %.2f s: %s\n",
                static_cast<int>(GetNum(r, "nnodes", 0)), GetStr(r, "backend", "?").c_str(), rounds.size(),
                rounds.size() == 1 ? "" : "s", GetNum(r, "probe_time_s", 0),
                code == 0   ? "healthy"
                : code == 1 ? "PROBLEMS FOUND"
                            : "PROBE FAILED");
  if (!GetStr(r, "error").empty()) out += "  error: " + GetStr(r, "error") + "\n";
  double ref = GetNum(r, "reference_time_s");
  if (std::isfinite(ref))
    out += Printf("  median test time %s; straggler factor %.3g", FormatSeconds(ref).c_str(),
                  GetNum(r, "straggler_factor", 0)) +
           (std::isfinite(GetNum(r, "min_bandwidth_mbps"))
                ? "; --min-bandwidth " + FormatMbps(GetNum(r, "min_bandwidth_mbps"))
                : std::string()) +
           "\n";
  out += Printf("  %4s  %-16s %-22s %-10s %11s %9s %9s  %s\n", "rank", "host", "address", "status", "bandwidth",
                "latency", "time", "note");
  for (const json& n : GetArr(r, "nodes")) {
    std::string status = GetStr(n, "status", "?");
    if (!GetBool(n, "decided", true) && status != "ok") status += "?";
    out += Printf("  %4d  %-16.16s %-22.22s %-10s %11s %9s %9s  %s\n", static_cast<int>(GetNum(n, "rank", -1)),
                  GetStr(n, "host", "-").c_str(), GetStr(n, "addr", "-").c_str(), status.c_str(),
                  FormatMbps(GetNum(n, "bandwidth_mbps")).c_str(), FormatUs(GetNum(n, "latency_us")).c_str(),
                  FormatSeconds(GetNum(n, "time_s")).c_str(), GetStr(n, "reason").c_str());
    static const json kNull;
    const json& local = n.is_object() && n.contains("local") ? n["local"] : kNull;
    for (const json& p : GetArr(local, "pairs")) {
      out += Printf("        GPU %d -> GPU %d copy %s%s\n", static_cast<int>(GetNum(p, "src", -1)),
                    static_cast<int>(GetNum(p, "dst", -1)), FormatMbps(GetNum(p, "mbps")).c_str(),
                    GetBool(p, "ok", true) ? "" : "  (under --min-bandwidth)");
    }
  }
  std::string bad;
  for (const json& l : GetArr(r, "links")) {
    std::string status = GetStr(l, "status", "?");
    if (status == "ok") continue;
    bad += Printf("  %-9s %-10s %s\n", PairName(l.is_object() ? l.value("nodes", json()) : json()).c_str(),
                  status.c_str(), GetStr(l, "reason").c_str());
  }
  if (!bad.empty()) out += "  links not ok:\n" + bad;
  return out;
}

std::string RenderRound(const RoundRecord& rr, const std::vector<TestResult>& tests, const Verdict& after,
                        const JudgeConfig& config) {
  std::string out = Printf("round %d (%s): %zu test%s in %zu step%s, %s\n", rr.round, rr.plan.kind.c_str(),
                           rr.tests.size(), rr.tests.size() == 1 ? "" : "s", rr.plan.steps.size(),
                           rr.plan.steps.size() == 1 ? "" : "s", FormatSeconds(rr.elapsed_s).c_str());
  for (int i : rr.tests) {
    if (i < 0 || i >= static_cast<int>(tests.size())) continue;
    const TestResult& t = tests[i];
    std::string bad = BadReason(t, after.reference_time_s, config);
    std::string pair = std::to_string(t.a) + "-" + std::to_string(t.b);
    if (t.completed) {
      out += Printf("  %-9s %-4s %11s -> %11s <-  %9s %9s  %s\n", pair.c_str(), bad.empty() ? "good" : "bad",
                    FormatMbps(t.fwd_mbps).c_str(), FormatMbps(t.bwd_mbps).c_str(), FormatUs(t.latency_us).c_str(),
                    FormatSeconds(t.time_s).c_str(), bad.c_str());
      if (t.stopped) out.insert(out.size() - 1, (bad.empty() ? "" : "; ") + t.stop_note);
    } else {
      out += Printf("  %-9s %-4s %s\n", pair.c_str(), "bad", bad.c_str());
    }
  }
  if (!after.recheck.empty()) {
    std::string which;
    for (const auto& [a, b] : after.recheck)
      which += (which.empty() ? "" : ", ") + std::to_string(a) + "-" + std::to_string(b);
    out += "  slow once, to be tested again: " + which + "\n";
  }
  if (!after.undecided.empty()) {
    std::string who;
    for (int u : after.undecided) who += (who.empty() ? "" : ", ") + std::to_string(u);
    out += "  undecided: node" + std::string(after.undecided.size() > 1 ? "s " : " ") + who +
           " (bad with a single partner so far)\n";
  }
  return out;
}

}  // namespace xtimer::netprobe
