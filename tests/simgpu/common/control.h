// Faults a test injects into a running job: SIMGPU_CONTROL names a text file the test rewrites
// while the ranks run. Each line is a selector and settings; a line applies to this process when
// every selector word matches (later lines win):
//
//   rank=3 gpu_factor=2.5      # RANK 3: kernels and GEMMs take 2.5x their device time
//   node=1 net_gbps=0.2        # SIMGPU_NODE 1: its network carries 0.2 GB/s
//   all gpu_factor=1           # every process
//
// Selectors: `all`, `rank=N` (the process' RANK), `node=N` (its SIMGPU_NODE). Settings the
// simulation reads: `gpu_factor` (multiplies the device time every simgpu_sleep_ns and every
// GEMM asks for; 1 = normal) and `net_gbps` (this process' network rate, replacing
// SIMGPU_NET_GBPS; a transfer goes at the slowest rate among the ranks it exchanges with).
// Other `key=value` words are left to the test's own program, which may read the same file.
// The file is read again when it changes, at most every 50 ms; a missing file means no fault.
#pragma once

#include <cstdint>
#include <string>

namespace simgpu {

struct Faults {
  double gpu_factor = 1.0;
  double net_gbps = -1.0;  // < 0: not set (SIMGPU_NET_GBPS applies)
  bool nccl_blackhole = false;
};

// The stuck-kernel rule of a control text (empty pattern: none).
struct StuckKernel {
  std::string pattern;
  int64_t launch = 1;  // the N-th matching launch is the one that never completes
};

// The faults in force for this process now. Cheap (relaxed loads) between re-reads.
Faults current_faults();

// True when the launch of a kernel named `name` (demangled) that is starting now is the one the
// stuck_kernel rule in force picks; counts the matching launches. Cheap when no rule is set.
bool stuck_kernel_launch(const std::string& name);

// Parses the control text for a process with `rank` and `node` (-1: not set). For tests.
Faults parse_faults(const char* text, int rank, int node, StuckKernel* stuck = nullptr);

}  // namespace simgpu
