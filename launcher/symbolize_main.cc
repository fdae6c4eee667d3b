// xtimer_symbolize FILE...: fills in function, source file and line (with inlined frames) in
// stack files written by the preloaded library, in place. The preload starts it after each dump;
// the node agent will call the same library (common/stacks/stack_symbolize.h) directly.
#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/stacks/stack_symbolize.h"
#include "common/stacks/symbolizer.h"

namespace {

void Usage() {
  std::fprintf(stderr,
               "usage: xtimer_symbolize [--sysroot DIR] [--quiet] FILE...\n"
               "  Symbolises xtimer stack files (*.stacktrace) in place.\n"
               "  --sysroot DIR  prefix for module paths (e.g. /proc/PID/root for a container)\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string sysroot;
  bool quiet = false;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--sysroot") == 0 && i + 1 < argc) {
      sysroot = argv[++i];
    } else if (std::strcmp(argv[i], "--quiet") == 0) {
      quiet = true;
    } else if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
      Usage();
      return 0;
    } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
      Usage();
      return 2;
    } else {
      files.push_back(argv[i]);
    }
  }
  if (files.empty()) {
    Usage();
    return 2;
  }
  // Started next to a training process that may be the slow one: stay out of its way.
  setpriority(PRIO_PROCESS, 0, 10);

  xtimer::Symbolizer symbolizer(sysroot);
  int failed = 0;
  for (const std::string& file : files) {
    xtimer::SymbolizeSummary summary;
    std::string error;
    if (!xtimer::SymbolizeStackFile(file, symbolizer, &summary, &error)) {
      std::fprintf(stderr, "xtimer_symbolize: %s\n", error.c_str());
      ++failed;
      continue;
    }
    if (quiet) continue;
    if (summary.already) {
      std::fprintf(stderr, "xtimer_symbolize: %s: already symbolised (or replaced by a newer dump)\n", file.c_str());
      continue;
    }
    std::fprintf(stderr, "xtimer_symbolize: %s: %d of %d native frames resolved\n", file.c_str(), summary.resolved,
                 summary.frames);
    for (const auto& [module, why] : summary.module_errors)
      std::fprintf(stderr, "xtimer_symbolize:   %s: %s\n", module.c_str(), why.c_str());
  }
  return failed == 0 ? 0 : 1;
}
