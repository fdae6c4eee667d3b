#include "launcher/run/network_check.h"

#include <cstdio>

#include "common/env.h"
#include "common/log.h"
#include "netprobe/node.h"

namespace xtimer::run {
namespace {

using nlohmann::json;

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}

}  // namespace

ProbeSettings ProbeSettingsFromEnv(bool exclude_straggler, double min_bandwidth_mbps) {
  ProbeSettings s;
  s.exclude_straggler = exclude_straggler;
  std::string size = env::String("XTIMER_NETCHECK_SIZE");
  if (!netprobe::ParseSize(size, &s.size) || s.size < 4) {
    Log(LogLevel::kWarn, "XTIMER_NETCHECK_SIZE=%s is not a byte count such as 3M; using the default %s", size.c_str(),
        env::Default("XTIMER_NETCHECK_SIZE"));
    netprobe::ParseSize(env::Default("XTIMER_NETCHECK_SIZE"), &s.size);
  }
  s.timeout_s = env::Double("XTIMER_NETCHECK_TIMEOUT");
  if (!(s.timeout_s > 0 && s.timeout_s <= 3600)) {
    Log(LogLevel::kWarn, "XTIMER_NETCHECK_TIMEOUT=%g is not seconds in (0, 3600]; using the default %s", s.timeout_s,
        env::Default("XTIMER_NETCHECK_TIMEOUT"));
    s.timeout_s = env::DefaultDouble("XTIMER_NETCHECK_TIMEOUT");
  }
  s.min_bandwidth_mbps =
      min_bandwidth_mbps > 0 ? min_bandwidth_mbps : env::Double("XTIMER_NETCHECK_MIN_BANDWIDTH", 0, 1e12);
  return s;
}

netprobe::Options ProbeOptions(const ProbeSettings& s, const std::string& host, int port, int rank, int nnodes) {
  netprobe::Options o;
  o.rdzv_host = host;
  o.rdzv_port = port;
  o.nnodes = nnodes;
  o.node_rank = rank;
  o.backend = netprobe::Backend::kTcp;
  o.size = s.size;
  o.timeout_s = s.timeout_s;
  o.min_bandwidth_mbps = s.min_bandwidth_mbps;
  o.connect_timeout_s = s.timeout_s;  // one deadline for everything, XTIMER_NETCHECK_TIMEOUT
  return o;
}

std::string JoinHostPort(const std::string& host, int port) {
  bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

bool SplitProbeAddress(const std::string& s, std::string* host, int* port) {
  return netprobe::SplitHostPort(s, host, port);
}

bool RunProbeNode(const ProbeSettings& s, const std::string& host, int port, int rank, int nnodes, json* report,
                  std::string* error) {
  return netprobe::RunNodeSide(ProbeOptions(s, host, port, rank, nnodes), report, error);
}

const char* Name(Fate f) {
  switch (f) {
    case Fate::kPassed: return "passed";
    case Fate::kExcluded: return "excluded";
    case Fate::kUnchecked: return "unchecked";
  }
  return "?";
}

std::vector<int> RoundVerdict::Excluded() const {
  std::vector<int> out;
  for (size_t r = 0; r < nodes.size(); ++r)
    if (nodes[r].fate == Fate::kExcluded) out.push_back(static_cast<int>(r));
  return out;
}

std::string RoundVerdict::Summary() const {
  std::string head = std::to_string(nodes.size()) + " nodes probed in " + Seconds(probe_time_s);
  if (!error.empty()) return head + ": the probe failed: " + error;
  int passed = 0, unchecked = 0;
  std::string out;
  for (size_t r = 0; r < nodes.size(); ++r) {
    const NodeFate& n = nodes[r];
    if (n.fate == Fate::kPassed) ++passed;
    if (n.fate == Fate::kUnchecked) ++unchecked;
    if (n.fate == Fate::kExcluded || (n.fate == Fate::kPassed && n.status != "ok"))
      out += "; group rank " + std::to_string(r) + " " + n.status + (n.fate == Fate::kPassed ? " (kept)" : "") + ": " +
             n.reason;
  }
  std::vector<int> excluded = Excluded();
  head += ": " + std::to_string(passed) + " passed, " + std::to_string(excluded.size()) + " left out";
  if (unchecked > 0) head += ", " + std::to_string(unchecked) + " unchecked";
  return head + out;
}

json RoundVerdict::ToJson(const std::vector<std::string>& ids) const {
  json nodes_j = json::array();
  for (size_t r = 0; r < nodes.size(); ++r)
    nodes_j.push_back({{"node", r < ids.size() ? ids[r] : ""},
                       {"fate", Name(nodes[r].fate)},
                       {"status", nodes[r].status},
                       {"reason", nodes[r].reason}});
  json j = {{"nodes", nodes_j}, {"probe_time_s", probe_time_s}};
  if (!error.empty()) j["error"] = error;
  return j;
}

bool RoundVerdict::FromJson(const json& j, int nnodes, RoundVerdict* out, std::string* error) {
  try {
    RoundVerdict v;
    v.error = j.value("error", "");
    v.probe_time_s = j.value("probe_time_s", 0.0);
    const json& nodes = j.at("nodes");
    if (!nodes.is_array() || static_cast<int>(nodes.size()) != nnodes)
      return (*error = "its node list does not have the round's " + std::to_string(nnodes) + " nodes"), false;
    for (const json& n : nodes) {
      NodeFate f;
      std::string fate = n.at("fate").get<std::string>();
      if (fate == "passed") f.fate = Fate::kPassed;
      else if (fate == "excluded") f.fate = Fate::kExcluded;
      else if (fate == "unchecked") f.fate = Fate::kUnchecked;
      else return (*error = "unknown fate '" + fate + "'"), false;
      f.status = n.at("status").get<std::string>();
      f.reason = n.at("reason").get<std::string>();
      v.nodes.push_back(f);
    }
    *out = std::move(v);
    return true;
  } catch (const std::exception& e) {
    *error = std::string("malformed: ") + e.what();
    return false;
  }
}

RoundVerdict JudgeRound(const json& report, int nnodes, bool exclude_straggler) {
  RoundVerdict v;
  v.nodes.assign(nnodes, NodeFate{Fate::kUnchecked, "unchecked", ""});
  auto fail = [&](const std::string& why) {
    v.error = why;
    for (NodeFate& n : v.nodes) n = NodeFate{Fate::kUnchecked, "unchecked", ""};
    return v;
  };
  if (!report.is_object()) return fail("no report");
  v.probe_time_s = report.value("probe_time_s", 0.0);
  if (report.contains("error") && report["error"].is_string()) return fail(report["error"].get<std::string>());
  auto nodes = report.find("nodes");
  if (nodes == report.end() || !nodes->is_array()) return fail("the report has no node list");
  const double timeout = report.value("timeout_s", 0.0);
  std::vector<std::string> status(nnodes);
  std::vector<std::string> reason(nnodes);
  std::vector<bool> decided(nnodes, true);
  for (const json& n : *nodes) {
    if (!n.is_object() || !n.contains("rank") || !n["rank"].is_number_integer()) continue;
    int r = n["rank"].get<int>();
    if (r < 0 || r >= nnodes) continue;
    status[r] = n.value("status", "");
    reason[r] = n.value("reason", "");
    decided[r] = n.value("decided", true);
  }
  int missing = 0;
  for (int r = 0; r < nnodes; ++r) {
    if (status[r].empty()) return fail("the report has no verdict on group rank " + std::to_string(r));
    if (status[r] == "missing") ++missing;
  }
  const int reached = nnodes - 1 - missing;  // other nodes that reached group rank 0
  if (status[0] == "missing") {
    // Its own node side never reached the rendezvous it hosts, at the address the others use.
    v.nodes[0] = {Fate::kExcluded, "faulty",
                  "cut off: it could not reach the probe it hosted at its own address (group rank 0)"};
    return v;  // the rest are probed again, under another group rank 0
  }
  if (missing > 0 && reached < missing) {
    if (nnodes == 2) {
      std::string why =
          "the two nodes could not reach each other (group rank 1 never reached the probe on "
          "group rank 0); with two nodes neither can be blamed";
      v.nodes[0] = {Fate::kExcluded, "faulty", why};
      v.nodes[1] = {Fate::kExcluded, "faulty", why};
      return v;
    }
    v.nodes[0] = {Fate::kExcluded, "faulty",
                  "cut off: " + std::to_string(missing) + " of the " + std::to_string(nnodes - 1) +
                      " other nodes could not reach the probe it hosted (group rank 0)"};
    return v;  // the rest are probed again, under another group rank 0
  }
  for (int r = 0; r < nnodes; ++r) {
    NodeFate& f = v.nodes[r];
    f.status = status[r];
    f.reason = reason[r];
    if (!decided[r] && !f.reason.empty()) f.reason += " (best guess: no further partner was left)";
    if (status[r] == "ok") {
      f.fate = Fate::kPassed;
    } else if (status[r] == "straggler") {
      f.fate = exclude_straggler ? Fate::kExcluded : Fate::kPassed;
    } else if (status[r] == "missing") {
      f.fate = Fate::kExcluded;
      f.status = "faulty";
      f.reason = "unreachable: it never reached the probe on group rank 0" +
                 (timeout > 0 ? " within " + Seconds(timeout) : std::string()) + ", which " + std::to_string(reached) +
                 " other node(s) reached";
    } else {
      f.fate = Fate::kExcluded;  // faulty (undecided never appears in a final report)
    }
  }
  return v;
}

}  // namespace xtimer::run
