// xtimer_run --numa-affinity's reading of the topology (launcher/run/numa.h) against fake sysfs
// trees: which PCI devices are GPUs, in which order, CUDA_VISIBLE_DEVICES, the CPU list format,
// and each worker's CPUs.
#include "launcher/run/numa.h"

#include <gtest/gtest.h>

#include "tests/launcher/fake_sysfs.h"

namespace xtimer::run {
namespace {

using testing::FakeSysfs;

TEST(CpuList, ParsesTheKernelsFormat) {
  std::vector<int> cpus;
  ASSERT_TRUE(ParseCpuList("0-3,8,10-11\n", &cpus));
  EXPECT_EQ(cpus, (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  ASSERT_TRUE(ParseCpuList("\n", &cpus));  // a node with memory only
  EXPECT_TRUE(cpus.empty());
  for (const char* bad : {"a", "1-", "-1", "3-1", "1,,2", "0-99999999", "1 2"})
    EXPECT_FALSE(ParseCpuList(bad, &cpus)) << bad;
  EXPECT_EQ(FormatCpuList({11, 0, 1, 2, 3, 8, 10, 3}), "0-3,8,10-11");
  EXPECT_EQ(FormatCpuList({}), "");
}

TEST(Gpus, NvidiaDisplayControllersInPciOrder) {
  FakeSysfs fs;
  fs.Gpu("0000:b1:00.0", 1);
  fs.Gpu("0000:1b:00.0", 0);
  fs.Device("0000:2a:00.0", "0x10de", "0x030000", "0");  // a VGA-class NVIDIA GPU counts
  fs.Device("0000:05:00.0", "0x10de", "0x068000", "0");  // an NVSwitch does not
  fs.Device("0000:06:00.0", "0x8086", "0x030200", "0");  // nor another vendor's 3D controller
  fs.Device("0000:1b:00.1", "0x10de", "0x040300", "0");  // nor a GPU's audio function
  std::vector<Gpu> gpus = ListGpus(fs.root());
  ASSERT_EQ(gpus.size(), 3u);
  EXPECT_EQ(gpus[0].pci, "0000:1b:00.0");
  EXPECT_EQ(gpus[0].numa_node, 0);
  EXPECT_EQ(gpus[1].pci, "0000:2a:00.0");
  EXPECT_EQ(gpus[2].pci, "0000:b1:00.0");
  EXPECT_EQ(gpus[2].numa_node, 1);
  EXPECT_TRUE(ListGpus(fs.root() + "/nothing").empty());
}

TEST(Gpus, CudaVisibleDevices) {
  std::vector<Gpu> all = {{"0000:1b:00.0", 0}, {"0000:2a:00.0", 0}, {"0000:b1:00.0", 1}};
  std::vector<Gpu> out;
  std::string why;
  ASSERT_TRUE(VisibleGpus(all, nullptr, &out, &why));
  EXPECT_EQ(out.size(), 3u);
  ASSERT_TRUE(VisibleGpus(all, "2,0", &out, &why));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].pci, "0000:b1:00.0");
  EXPECT_EQ(out[1].pci, "0000:1b:00.0");
  ASSERT_TRUE(VisibleGpus(all, "", &out, &why));
  EXPECT_TRUE(out.empty());
  EXPECT_FALSE(VisibleGpus(all, "GPU-8d2f6c1e-1111-2222-3333-444455556666", &out, &why));
  EXPECT_NE(why.find("other than by index"), std::string::npos) << why;
  EXPECT_FALSE(VisibleGpus(all, "0,3", &out, &why));
  EXPECT_NE(why.find("names GPU 3, but sysfs shows 3"), std::string::npos) << why;
}

TEST(NumaPlan, EachWorkerOnItsGpusNode) {
  FakeSysfs fs;
  fs.Gpu("0000:1b:00.0", 0);
  fs.Gpu("0000:3d:00.0", 0);
  fs.Gpu("0000:b1:00.0", 1);
  fs.Gpu("0000:db:00.0", 1);
  fs.Node(0, "0-3,8-11");
  fs.Node(1, "4-7,12-15");
  std::vector<int> all_cpus;
  for (int c = 0; c < 16; ++c) all_cpus.push_back(c);
  NumaPlan plan = PlanNumaAffinity(fs.root(), 4, nullptr, all_cpus);
  ASSERT_EQ(plan.cpus.size(), 4u);
  EXPECT_EQ(FormatCpuList(plan.cpus[0]), "0-3,8-11");
  EXPECT_EQ(FormatCpuList(plan.cpus[1]), "0-3,8-11");
  EXPECT_EQ(FormatCpuList(plan.cpus[2]), "4-7,12-15");
  EXPECT_EQ(FormatCpuList(plan.cpus[3]), "4-7,12-15");
  EXPECT_TRUE(plan.problems.empty());
  ASSERT_EQ(plan.bound.size(), 4u);
  EXPECT_EQ(plan.bound[2], "local rank 2 (GPU 0000:b1:00.0) on NUMA node 1: CPUs 4-7,12-15");

  // CUDA_VISIBLE_DEVICES reorders; xtimer_run's own affinity narrows; ranks beyond the GPUs share.
  plan = PlanNumaAffinity(fs.root(), 3, "3,0", {0, 1, 4, 5});
  EXPECT_EQ(FormatCpuList(plan.cpus[0]), "4-5");  // GPU 3 is on node 1
  EXPECT_EQ(FormatCpuList(plan.cpus[1]), "0-1");
  EXPECT_EQ(FormatCpuList(plan.cpus[2]), "4-5");  // local rank 2 shares GPU 3
}

TEST(NumaPlan, WorkersStayUnboundWithAReason) {
  FakeSysfs fs;
  NumaPlan plan = PlanNumaAffinity(fs.root(), 2, nullptr, {0, 1});
  EXPECT_EQ(plan.cpus, std::vector<std::vector<int>>(2));
  ASSERT_EQ(plan.problems.size(), 1u);
  EXPECT_NE(plan.problems[0].find("no NVIDIA GPU"), std::string::npos);

  fs.Gpu("0000:1b:00.0", -1);  // a platform that does not say
  fs.Gpu("0000:b1:00.0", 1);   // node 1 has no cpulist
  fs.Gpu("0000:c1:00.0", 2);
  fs.Node(2, "8-9");  // none of them allowed
  plan = PlanNumaAffinity(fs.root(), 4, nullptr, {0, 1});
  EXPECT_EQ(plan.cpus, std::vector<std::vector<int>>(4));
  ASSERT_EQ(plan.problems.size(), 3u);  // local rank 3 repeats rank 0's reason: said once
  EXPECT_NE(plan.problems[0].find("numa_node -1"), std::string::npos) << plan.problems[0];
  EXPECT_NE(plan.problems[1].find("cannot read"), std::string::npos) << plan.problems[1];
  EXPECT_NE(plan.problems[2].find("none of NUMA node 2's CPUs (8-9) is allowed"), std::string::npos)
      << plan.problems[2];

  plan = PlanNumaAffinity(fs.root(), 1, "GPU-abc", {0, 1});
  ASSERT_EQ(plan.problems.size(), 1u);
  EXPECT_NE(plan.problems[0].find("other than by index"), std::string::npos);
}

TEST(NumaPlan, AllowedCpusOfThisProcess) {
  std::vector<int> cpus = AllowedCpus();
  ASSERT_FALSE(cpus.empty());
  EXPECT_TRUE(std::is_sorted(cpus.begin(), cpus.end()));
}

}  // namespace
}  // namespace xtimer::run
