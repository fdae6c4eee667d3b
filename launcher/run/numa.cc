#include "launcher/run/numa.h"

#include <sched.h>

#include <cerrno>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/env.h"
#include "common/parse_number.h"

namespace xtimer::run {
namespace {

// The first line of a small sysfs file, without its newline ("" when unreadable).
std::string ReadLine(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

}  // namespace

std::string SysfsRoot() { return env::String("XTIMER_SYSFS_ROOT"); }

std::vector<Gpu> ListGpus(const std::string& sysfs) {
  std::vector<Gpu> out;
  std::error_code ec;
  std::filesystem::directory_iterator it(std::filesystem::path(sysfs) / "bus/pci/devices", ec);
  if (ec) return out;
  for (const auto& entry : it) {
    const std::filesystem::path dir = entry.path();
    if (ReadLine(dir / "vendor") != "0x10de") continue;
    // Display controllers only: 0x0300 VGA (some workstation GPUs), 0x0302 3D (data-centre GPUs);
    // NVSwitches and audio functions of the same vendor are not GPUs.
    std::string cls = ReadLine(dir / "class");
    if (cls.rfind("0x0300", 0) != 0 && cls.rfind("0x0302", 0) != 0) continue;
    Gpu g;
    g.pci = dir.filename().string();
    long long node = -1;
    if (!ParseInt(ReadLine(dir / "numa_node"), -1, 1 << 16, &node)) node = -1;
    g.numa_node = static_cast<int>(node);
    out.push_back(std::move(g));
  }
  std::sort(out.begin(), out.end(), [](const Gpu& a, const Gpu& b) { return a.pci < b.pci; });
  return out;
}

bool VisibleGpus(const std::vector<Gpu>& all, const char* visible, std::vector<Gpu>* out, std::string* why) {
  out->clear();
  if (visible == nullptr) return (*out = all), true;
  // An empty value hides every GPU.
  std::stringstream in(visible);
  std::string item;
  while (std::getline(in, item, ',')) {
    long long i = -1;
    if (!ParseInt(item, 0, 1 << 16, &i)) {
      *why = "CUDA_VISIBLE_DEVICES=" + std::string(visible) +
             " names GPUs other than by index, which sysfs cannot match; use indices (nvidia-smi's order)";
      return false;
    }
    if (i >= static_cast<long long>(all.size())) {
      *why = "CUDA_VISIBLE_DEVICES=" + std::string(visible) + " names GPU " + item + ", but sysfs shows " +
             std::to_string(all.size());
      return false;
    }
    out->push_back(all[static_cast<size_t>(i)]);
  }
  return true;
}

bool ParseCpuList(const std::string& text, std::vector<int>* cpus) {
  cpus->clear();
  std::string s = text;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  if (s.empty()) return true;  // a node without CPUs (memory only)
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t dash = item.find('-');
    long long lo = 0, hi = 0;
    if (!ParseInt(item.substr(0, dash), 0, 1 << 20, &lo)) return false;
    hi = lo;
    if (dash != std::string::npos && !ParseInt(item.substr(dash + 1), lo, 1 << 20, &hi)) return false;
    if (hi - lo > (1 << 16)) return false;
    for (long long c = lo; c <= hi; ++c) cpus->push_back(static_cast<int>(c));
  }
  return true;
}

std::string FormatCpuList(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

bool NodeCpus(const std::string& sysfs, int node, std::vector<int>* cpus, std::string* why) {
  std::filesystem::path p =
      std::filesystem::path(sysfs) / "devices/system/node" / ("node" + std::to_string(node)) / "cpulist";
  std::ifstream in(p);
  std::string text;
  if (!in || !std::getline(in, text)) return (*why = "cannot read " + p.string()), false;
  if (!ParseCpuList(text, cpus))
    return (*why = p.string() + " is not a CPU list ('" + text.substr(0, 60) + "')"), false;
  return true;
}

NumaPlan PlanNumaAffinity(const std::string& sysfs, int nproc_per_node, const char* visible,
                          const std::vector<int>& allowed) {
  NumaPlan plan;
  plan.cpus.assign(static_cast<size_t>(std::max(nproc_per_node, 0)), {});
  std::vector<Gpu> all = ListGpus(sysfs), gpus;
  std::string why;
  if (all.empty()) {
    plan.problems.push_back("no NVIDIA GPU under " + sysfs + "/bus/pci/devices: the workers are not bound");
    return plan;
  }
  if (!VisibleGpus(all, visible, &gpus, &why)) {
    plan.problems.push_back(why + ": the workers are not bound");
    return plan;
  }
  if (gpus.empty()) {
    plan.problems.push_back("CUDA_VISIBLE_DEVICES leaves no GPU visible: the workers are not bound");
    return plan;
  }
  const std::set<int> may(allowed.begin(), allowed.end());
  std::set<std::string> said;
  for (int local = 0; local < nproc_per_node; ++local) {
    const Gpu& g = gpus[static_cast<size_t>(local) % gpus.size()];
    std::string who = "local rank " + std::to_string(local) + " (GPU " + g.pci + ")";
    auto problem = [&](const std::string& text) {
      if (said.insert(text).second) plan.problems.push_back(who + ": " + text);
    };
    if (g.numa_node < 0) {
      problem("the platform gives its GPU no NUMA node (numa_node -1): not bound");
      continue;
    }
    std::vector<int> node_cpus, mine;
    if (!NodeCpus(sysfs, g.numa_node, &node_cpus, &why)) {
      problem(why + ": not bound");
      continue;
    }
    for (int c : node_cpus)
      if (may.count(c)) mine.push_back(c);
    if (mine.empty()) {
      problem("none of NUMA node " + std::to_string(g.numa_node) + "'s CPUs (" + FormatCpuList(node_cpus) +
              ") is allowed to xtimer_run (" + FormatCpuList(allowed) + "): not bound");
      continue;
    }
    plan.bound.push_back(who + " on NUMA node " + std::to_string(g.numa_node) + ": CPUs " + FormatCpuList(mine));
    plan.cpus[static_cast<size_t>(local)] = std::move(mine);
  }
  return plan;
}

std::vector<int> AllowedCpus() {
  std::vector<int> out;
  // The kernel refuses a mask smaller than its own (EINVAL): grow until it fits.
  for (int n = 1024; n <= (1 << 20); n *= 2) {
    cpu_set_t* set = CPU_ALLOC(n);
    size_t size = CPU_ALLOC_SIZE(n);
    CPU_ZERO_S(size, set);
    if (sched_getaffinity(0, size, set) == 0) {
      for (int c = 0; c < n; ++c)
        if (CPU_ISSET_S(c, size, set)) out.push_back(c);
      CPU_FREE(set);
      return out;
    }
    CPU_FREE(set);
    if (errno != EINVAL) break;
  }
  return out;
}

}  // namespace xtimer::run
