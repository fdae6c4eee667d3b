// xtimer_netprobe: pre-flight network check. See README.md.
#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "common/env.h"
#include "netprobe/gpu_probe.h"
#include "netprobe/node.h"
#include "netprobe/options.h"

int main(int argc, char** argv) {
  using namespace xtimer::netprobe;
  signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args(argv + 1, argv + argc);
  Options o;
  std::string error;
  if (!ParseOptions(args, xtimer::env::Double("XTIMER_NETPROBE_TIMEOUT"), &o, &error)) {
    std::fprintf(stderr, "xtimer_netprobe: %s\n", error.c_str());
    return 2;
  }
  if (!o.worker_args.empty() || (!args.empty() && args[0] == "--internal-worker")) return RunGpuWorker(o.worker_args);
  if (o.help) {
    std::fputs(Usage(), stdout);
    return 0;
  }
  if (o.version) {
    std::puts("xtimer_netprobe 0.1.0 (protocol 1, report xtimer-netprobe v1)");
    return 0;
  }
  if (o.timeout_s <= 0) return FailProbe(o, "XTIMER_NETPROBE_TIMEOUT must be above 0 seconds");
  return o.serve ? RunServe(o) : RunNode(o);
}
