// The fault control file's lines (common/control.h): which apply to this process, which win.
#include "common/control.h"

#include <gtest/gtest.h>

namespace {

TEST(Control, LinesApplyByRankAndNode) {
  const char* text =
      "# faults\n"
      "rank=3 gpu_factor=2.5\n"
      "node=1 net_gbps=0.2   # node 1's network\n"
      "rank=3 node=0 net_gbps=7\n"
      "all host_sleep_ms=40  # for the test program, not the simulation\n";
  simgpu::Faults r3n1 = simgpu::parse_faults(text, 3, 1);
  EXPECT_DOUBLE_EQ(r3n1.gpu_factor, 2.5);
  EXPECT_DOUBLE_EQ(r3n1.net_gbps, 0.2);
  simgpu::Faults r3n0 = simgpu::parse_faults(text, 3, 0);
  EXPECT_DOUBLE_EQ(r3n0.gpu_factor, 2.5);
  EXPECT_DOUBLE_EQ(r3n0.net_gbps, 7);  // both selectors match
  simgpu::Faults r2n0 = simgpu::parse_faults(text, 2, 0);
  EXPECT_DOUBLE_EQ(r2n0.gpu_factor, 1);
  EXPECT_LT(r2n0.net_gbps, 0);  // not set: SIMGPU_NET_GBPS applies
  simgpu::Faults unset = simgpu::parse_faults(text, -1, -1);
  EXPECT_DOUBLE_EQ(unset.gpu_factor, 1);
}

TEST(Control, LaterLinesWinAndBadValuesAreIgnored) {
  const char* text =
      "all gpu_factor=2\n"
      "all gpu_factor=1\n"
      "all net_gbps=fast gpu_factor=-3\n"
      "gpu_factor=9\n"  // no selector: applies to nobody
      "rank=1x gpu_factor=4\n"
      "allx gpu_factor=5";
  simgpu::Faults f = simgpu::parse_faults(text, 1, 0);
  EXPECT_DOUBLE_EQ(f.gpu_factor, 1);
  EXPECT_LT(f.net_gbps, 0);
}

TEST(Control, StuckKernelAndBlackholeApplyToTheSelectedRanks) {
  const char* text =
      "rank=1 stuck_kernel=elementwise_kernel stuck_launch=3\n"
      "rank=2 nccl_blackhole=1\n"
      "rank=2 stuck_launch=0 nccl_blackhole=maybe\n";  // bad values: ignored
  simgpu::StuckKernel stuck;
  simgpu::Faults r1 = simgpu::parse_faults(text, 1, -1, &stuck);
  EXPECT_EQ(stuck.pattern, "elementwise_kernel");
  EXPECT_EQ(stuck.launch, 3);
  EXPECT_FALSE(r1.nccl_blackhole);
  simgpu::Faults r2 = simgpu::parse_faults(text, 2, -1, &stuck);
  EXPECT_TRUE(stuck.pattern.empty());
  EXPECT_EQ(stuck.launch, 1);
  EXPECT_TRUE(r2.nccl_blackhole);
}

}  // namespace
