// The machine's NVIDIA GPUs and NUMA nodes as sysfs shows them, for xtimer_run --numa-affinity
// (each worker on the CPUs of its GPU's NUMA node) and --auto-config (one worker per GPU).
// Nothing here loads CUDA; the root is XTIMER_SYSFS_ROOT (default /sys), so tests use a fake tree:
//
//   <root>/bus/pci/devices/<pci address>/{vendor,class,numa_node}
//   <root>/devices/system/node/node<N>/cpulist
//
// GPUs are the PCI devices of vendor 0x10de with a display class (0x0300xx, 0x0302xx), in PCI
// address order: nvidia-smi's order, and CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID (on a machine
// of identical GPUs also its default order). CUDA_VISIBLE_DEVICES given as indices picks and
// orders them as CUDA does; given as UUIDs or MIG names it cannot be matched to sysfs.
//
// Pure functions of the tree they read; no logging (the caller says what was decided).
#pragma once

#include <string>
#include <vector>

namespace xtimer::run {

struct Gpu {
  std::string pci;     // "0000:1b:00.0"
  int numa_node = -1;  // -1: the platform does not say
};

// XTIMER_SYSFS_ROOT.
std::string SysfsRoot();

// The NVIDIA GPUs under `sysfs`, in PCI address order (empty when none or unreadable).
std::vector<Gpu> ListGpus(const std::string& sysfs);

// The GPUs CUDA_VISIBLE_DEVICES (`visible`, nullptr = unset) leaves, in CUDA's order. False with
// *why when it names GPUs other than by index, or an index that is not there.
bool VisibleGpus(const std::vector<Gpu>& all, const char* visible, std::vector<Gpu>* out, std::string* why);

// The kernel's CPU list format: "0-3,8,10-11" (a trailing newline allowed). False on anything else.
bool ParseCpuList(const std::string& text, std::vector<int>* cpus);
// Sorted, ranges folded: {0,1,2,3,8} -> "0-3,8".
std::string FormatCpuList(std::vector<int> cpus);

// The CPUs of NUMA node `node` (its cpulist). False with *why when unreadable or malformed.
bool NodeCpus(const std::string& sysfs, int node, std::vector<int>* cpus, std::string* why);

struct NumaPlan {
  std::vector<std::vector<int>> cpus;  // by local rank; empty: that worker is not bound
  std::vector<std::string> bound;      // one line per bound worker: its GPU, node and CPUs
  std::vector<std::string> problems;   // why workers are not bound (one line per distinct reason)
};

// Local rank L uses the L-th visible GPU (modulo their count, when workers share GPUs) and is
// bound to the CPUs of that GPU's NUMA node that `allowed` (xtimer_run's own affinity) holds.
NumaPlan PlanNumaAffinity(const std::string& sysfs, int nproc_per_node, const char* visible,
                          const std::vector<int>& allowed);

// The CPUs this process may run on (sched_getaffinity).
std::vector<int> AllowedCpus();

}  // namespace xtimer::run
