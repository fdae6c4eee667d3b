#include "netprobe/judge.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

namespace xtimer::netprobe {
namespace {

std::string Fmt(const char* fmt, double a, double b = 0, double c = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, a, b, c);
  return buf;
}

std::string JoinRanks(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s += i + 1 == ranks.size() ? " and " : ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

bool IsBadNode(NodeStatus s) {
  return s == NodeStatus::kStraggler || s == NodeStatus::kFaulty || s == NodeStatus::kMissing;
}

// Why the node's local GPU check failed it, or "".
std::string LocalFault(const LocalResult& l, const JudgeConfig& c) {
  if (!l.ran) return "";
  if (!l.ok) return "local GPU check failed: " + l.error;
  if (c.min_bandwidth_mbps <= 0) return "";
  for (const LocalResult::Pair& p : l.pairs) {
    if (p.mbps < c.min_bandwidth_mbps) {
      return "GPU " + std::to_string(p.src) + " -> GPU " + std::to_string(p.dst) +
             Fmt(" copy bandwidth %.0f MB/s is under --min-bandwidth %.0f MB/s", p.mbps, c.min_bandwidth_mbps);
    }
  }
  for (const auto& [gpu, mbps] : l.h2d_mbps) {
    if (mbps < c.min_bandwidth_mbps) {
      return "host -> GPU " + std::to_string(gpu) +
             Fmt(" copy bandwidth %.0f MB/s is under --min-bandwidth %.0f MB/s", mbps, c.min_bandwidth_mbps);
    }
  }
  return "";
}

}  // namespace

const char* Name(NodeStatus s) {
  switch (s) {
    case NodeStatus::kOk: return "ok";
    case NodeStatus::kStraggler: return "straggler";
    case NodeStatus::kFaulty: return "faulty";
    case NodeStatus::kMissing: return "missing";
    case NodeStatus::kUndecided: return "undecided";
  }
  return "?";
}

const char* Name(LinkStatus s) {
  switch (s) {
    case LinkStatus::kOk: return "ok";
    case LinkStatus::kBad: return "bad";
    case LinkStatus::kNode: return "node";
    case LinkStatus::kUndecided: return "undecided";
  }
  return "?";
}

bool Verdict::healthy() const {
  for (const NodeVerdict& n : nodes)
    if (n.status != NodeStatus::kOk) return false;
  for (const LinkVerdict& l : links)
    if (l.status != LinkStatus::kOk) return false;
  return true;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

std::string BadReason(const TestResult& t, double reference_time_s, const JudgeConfig& c) {
  if (!t.completed) return "failed: " + (t.error.empty() ? std::string("no result") : t.error);
  if (reference_time_s > 0 && t.time_s > c.straggler_factor * reference_time_s) {
    return Fmt("slow: %.3g s is over %.3g x the median %.3g s", t.time_s, c.straggler_factor, reference_time_s);
  }
  if (c.min_bandwidth_mbps > 0 && t.bandwidth_mbps() < c.min_bandwidth_mbps) {
    return Fmt("%.0f MB/s is under --min-bandwidth %.0f MB/s", t.bandwidth_mbps(), c.min_bandwidth_mbps);
  }
  return "";
}

Verdict Judge(const std::vector<NodeInput>& inputs, const std::vector<TestResult>& tests, const JudgeConfig& config,
              bool final) {
  const int nnodes = static_cast<int>(inputs.size());
  Verdict v;
  v.nodes.resize(nnodes);
  for (int r = 0; r < nnodes; ++r) v.nodes[r].rank = r;
  auto valid = [&](int r) { return r >= 0 && r < nnodes; };

  // The reference time: median over nodes of their best completed time in the base rounds.
  // (If no base test completed, every completed test counts.)
  for (bool base_only : {true, false}) {
    std::vector<double> best(nnodes, std::numeric_limits<double>::infinity());
    for (const TestResult& t : tests) {
      if (!t.completed || (base_only && !t.base) || !valid(t.a) || !valid(t.b)) continue;
      best[t.a] = std::min(best[t.a], t.time_s);
      best[t.b] = std::min(best[t.b], t.time_s);
    }
    std::vector<double> finite;
    for (double b : best)
      if (std::isfinite(b)) finite.push_back(b);
    v.reference_time_s = Median(finite);
    if (v.reference_time_s > 0) break;
  }

  // Evidence per node.
  std::vector<std::string> bad_reason(tests.size());
  std::vector<std::set<int>> good(nnodes), bad(nnodes);
  std::vector<int> best_test(nnodes, -1);
  std::vector<std::string> first_bad(nnodes);
  for (size_t i = 0; i < tests.size(); ++i) {
    const TestResult& t = tests[i];
    if (!valid(t.a) || !valid(t.b) || t.a == t.b) continue;
    bad_reason[i] = BadReason(t, v.reference_time_s, config);
    for (auto [self, partner] : {std::pair{t.a, t.b}, std::pair{t.b, t.a}}) {
      NodeVerdict& n = v.nodes[self];
      ++n.tests;
      if (bad_reason[i].empty()) {
        good[self].insert(partner);
      } else {
        bad[self].insert(partner);
        if (first_bad[self].empty()) first_bad[self] = bad_reason[i];
      }
      if (t.completed && (best_test[self] < 0 || t.time_s < tests[best_test[self]].time_s))
        best_test[self] = static_cast<int>(i);
    }
  }
  for (int r = 0; r < nnodes; ++r) {
    NodeVerdict& n = v.nodes[r];
    n.good_partners.assign(good[r].begin(), good[r].end());
    n.bad_partners.assign(bad[r].begin(), bad[r].end());
    if (best_test[r] >= 0) {
      const TestResult& t = tests[best_test[r]];
      n.tested = true;
      n.time_s = t.time_s;
      n.bandwidth_mbps = t.bandwidth_mbps();
      n.latency_us = t.latency_us;
    }
  }

  // A node is "ok on the network" once it passed a test with anyone.
  // (A node that left the rendezvous during the probe is never credible.)
  auto net_ok = [&](int r) {
    return valid(r) && !good[r].empty() && inputs[r].present && inputs[r].left_reason.empty();
  };
  auto known_bad = [&](int r) {
    const NodeInput& in = inputs[r];
    return !in.present || !in.left_reason.empty() || !LocalFault(in.local, config).empty();
  };
  const double limit = config.straggler_factor * v.reference_time_s;

  // What a node whose tests are all bad is, from its own figures.
  auto classify = [&](NodeVerdict& n) {
    const std::string partners = JoinRanks(n.bad_partners);
    if (!n.tested) {
      n.status = NodeStatus::kFaulty;
      n.reason = "failed with node" + std::string(n.bad_partners.size() > 1 ? "s " : " ") + partners + " (" +
                 first_bad[n.rank] + ")";
    } else if (config.min_bandwidth_mbps > 0 && n.bandwidth_mbps < config.min_bandwidth_mbps) {
      n.status = NodeStatus::kFaulty;
      n.reason = Fmt("best bandwidth %.0f MB/s is under --min-bandwidth %.0f MB/s", n.bandwidth_mbps,
                     config.min_bandwidth_mbps) +
                 " (tested with node" + (n.bad_partners.size() > 1 ? "s " : " ") + partners + ")";
    } else if (v.reference_time_s > 0 && n.time_s > limit) {
      n.status = NodeStatus::kStraggler;
      n.reason = Fmt("best time %.3g s is over %.3g x the median %.3g s", n.time_s, config.straggler_factor,
                     v.reference_time_s) +
                 " (tested with node" + (n.bad_partners.size() > 1 ? "s " : " ") + partners + ")";
    } else {
      n.status = NodeStatus::kFaulty;
      n.reason = "bad with node" + std::string(n.bad_partners.size() > 1 ? "s " : " ") + partners + " (" +
                 first_bad[n.rank] + ")";
    }
  };

  for (int r = 0; r < nnodes; ++r) {
    NodeVerdict& n = v.nodes[r];
    const NodeInput& in = inputs[r];
    std::string local_fault = LocalFault(in.local, config);
    if (!in.present) {
      n.status = NodeStatus::kMissing;
      n.reason = "never joined the rendezvous before the deadline";
    } else if (!in.left_reason.empty()) {
      n.status = NodeStatus::kFaulty;
      n.reason = in.left_reason;
    } else if (!local_fault.empty()) {
      n.status = NodeStatus::kFaulty;
      n.reason = local_fault;
    } else if (net_ok(r)) {
      n.status = NodeStatus::kOk;
    } else if (n.tests == 0) {
      n.status = NodeStatus::kUndecided;
      n.reason = "not tested";
    } else {
      // Partners known to be bad before any test (left, GPU fault) explain the failure and
      // count for nothing; of the rest, two are needed and one of them must be ok elsewhere.
      int counted = 0, credible = 0;
      for (int p : n.bad_partners) {
        if (known_bad(p)) continue;
        ++counted;
        credible += net_ok(p) ? 1 : 0;
      }
      if (counted >= 2 && credible >= 1) {
        classify(n);
      } else {
        n.status = NodeStatus::kUndecided;
        n.reason = "bad only with node" + std::string(n.bad_partners.size() > 1 ? "s " : " ") +
                   JoinRanks(n.bad_partners) + "; needs another partner";
      }
    }
  }

  for (int r = 0; r < nnodes; ++r) {
    NodeVerdict& n = v.nodes[r];
    if (n.status != NodeStatus::kUndecided) continue;
    if (!final) {
      v.undecided.push_back(r);
      continue;
    }
    n.decided = false;
    if (n.tests == 0) {
      n.status = NodeStatus::kOk;
      n.reason = "not tested: no partner was available";
    } else {
      classify(n);
      n.reason += "; no further partner to tell a bad node from a bad link";
    }
  }

  // Links: the last test of each pair decides.
  std::map<std::pair<int, int>, int> last, count;
  for (size_t i = 0; i < tests.size(); ++i) {
    const TestResult& t = tests[i];
    if (!valid(t.a) || !valid(t.b) || t.a == t.b) continue;
    std::pair<int, int> key{std::min(t.a, t.b), std::max(t.a, t.b)};
    last[key] = static_cast<int>(i);
    ++count[key];
  }
  for (const auto& [pair, i] : last) {
    LinkVerdict l;
    l.a = pair.first;
    l.b = pair.second;
    l.test = i;
    l.reason = bad_reason[i];
    const NodeVerdict& na = v.nodes[l.a];
    const NodeVerdict& nb = v.nodes[l.b];
    if (l.reason.empty()) {
      l.status = LinkStatus::kOk;
    } else if (na.status == NodeStatus::kOk && nb.status == NodeStatus::kOk && na.decided && nb.decided) {
      if (tests[i].completed && count[pair] < 2 && !final) {
        l.status = LinkStatus::kUndecided;  // slow once: test it again before blaming it
        v.recheck.push_back(pair);
      } else {
        l.status = LinkStatus::kBad;
      }
    } else if ((IsBadNode(na.status) && na.decided) || (IsBadNode(nb.status) && nb.decided)) {
      l.status = LinkStatus::kNode;
      const NodeVerdict& culprit = IsBadNode(na.status) && na.decided ? na : nb;
      l.reason +=
          std::string("; explained by node ") + std::to_string(culprit.rank) + " (" + Name(culprit.status) + ")";
    } else {
      l.status = LinkStatus::kUndecided;
    }
    v.links.push_back(std::move(l));
  }
  return v;
}

}  // namespace xtimer::netprobe
