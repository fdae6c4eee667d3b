// A fake sysfs tree for xtimer_run's topology code (launcher/run/numa.h): PCI devices with
// vendor, class and NUMA node, and NUMA nodes with their CPU lists. Removed with the object.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace xtimer::run::testing {

class FakeSysfs {
 public:
  FakeSysfs() {
    char tmpl[] = "/tmp/xtimer-fake-sysfs-XXXXXX";
    root_ = mkdtemp(tmpl);
  }
  ~FakeSysfs() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  FakeSysfs(const FakeSysfs&) = delete;
  FakeSysfs& operator=(const FakeSysfs&) = delete;

  const std::string& root() const { return root_; }

  // A PCI device; an NVIDIA GPU is vendor 0x10de, class 0x030200.
  void Device(const std::string& pci, const std::string& vendor, const std::string& cls, const std::string& numa_node) {
    std::string dir = root_ + "/bus/pci/devices/" + pci;
    Write(dir + "/vendor", vendor + "\n");
    Write(dir + "/class", cls + "\n");
    Write(dir + "/numa_node", numa_node + "\n");
  }
  void Gpu(const std::string& pci, int numa_node) { Device(pci, "0x10de", "0x030200", std::to_string(numa_node)); }
  void Node(int node, const std::string& cpulist) {
    Write(root_ + "/devices/system/node/node" + std::to_string(node) + "/cpulist", cpulist + "\n");
  }

 private:
  static void Write(const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
  }
  std::string root_;
};

}  // namespace xtimer::run::testing
