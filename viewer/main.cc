// xtimer_stacktrace_viewer: merges every rank's stack file of a folder into flame graphs, call
// trees and a verdict naming the ranks that are out of step. See viewer/README.md.
#include <getopt.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <string>

#include "common/stacks/stack_file.h"
#include "viewer/frame_label.h"
#include "viewer/merge_output.h"
#include "viewer/stack_folder.h"
#include "viewer/verdict.h"

namespace {

constexpr const char* kUsage =
    "usage: xtimer_stacktrace_viewer --path DIR [--out DIR] [--format svg,folded,dot,speedscope]\n"
    "                                [--collapse-idle] [--world-size N] [--threads N] [--quiet]\n"
    "Reads every *.stacktrace in DIR, writes py_stack.* / cpp_stack.* and verdict.json into --out\n"
    "(default: DIR) and prints the verdict. Exit status: 0 merged, 1 bad arguments, 2 no usable\n"
    "stack file or DIR unreadable, 3 output could not be written.\n";

void Say(const std::string& line) { std::fprintf(stdout, "%s\n", line.c_str()); }

// A whole non-negative number up to max, or -1.
int Count(const char* text, int max) {
  int v = 0;
  const char* end = text + std::strlen(text);
  auto [p, ec] = std::from_chars(text, end, v);
  return ec == std::errc() && p == end && *text != '\0' && v >= 0 && v <= max ? v : -1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path, out, formats = "svg,folded,dot,speedscope";
  bool collapse_idle = false, quiet = false;
  int threads = 0;
  int32_t world = 0;
  const option longopts[] = {{"path", required_argument, nullptr, 'p'},
                             {"out", required_argument, nullptr, 'o'},
                             {"format", required_argument, nullptr, 'f'},
                             {"collapse-idle", no_argument, nullptr, 'c'},
                             {"threads", required_argument, nullptr, 'j'},
                             {"world-size", required_argument, nullptr, 'w'},
                             {"quiet", no_argument, nullptr, 'q'},
                             {"help", no_argument, nullptr, 'h'},
                             {nullptr, 0, nullptr, 0}};
  for (int c; (c = getopt_long(argc, argv, "p:o:f:cj:w:qh", longopts, nullptr)) != -1;) {
    switch (c) {
      case 'p': path = optarg; break;
      case 'o': out = optarg; break;
      case 'f': formats = optarg; break;
      case 'c': collapse_idle = true; break;
      case 'j':
        if ((threads = Count(optarg, 64)) < 0)
          return std::fputs("xtimer_stacktrace_viewer: --threads wants 0 (one per CPU) to 64\n", stderr), 1;
        break;
      case 'w':
        if ((world = Count(optarg, xtimer::kMaxStackWorldSize)) < 0)
          return std::fprintf(stderr, "xtimer_stacktrace_viewer: --world-size wants 0 (from the files) to %d\n",
                              xtimer::kMaxStackWorldSize),
                 1;
        break;
      case 'q': quiet = true; break;
      case 'h': std::fputs(kUsage, stdout); return 0;
      default: std::fputs(kUsage, stderr); return 1;
    }
  }
  if (path.empty() || optind != argc) {
    std::fputs(kUsage, stderr);
    return 1;
  }
  if (out.empty()) out = path;
  xtimer::OutputOptions output;
  output.collapse_idle = collapse_idle;
  std::string error;
  if (!xtimer::ParseOutputFormats(formats, &output.formats, &error)) {
    std::fprintf(stderr, "xtimer_stacktrace_viewer: %s\n", error.c_str());
    return 1;
  }

  xtimer::FolderOptions folder;
  folder.threads = threads;
  // Progress only for a person watching: a terminal on stderr.
  bool tty = isatty(STDERR_FILENO) == 1 && !quiet;
  auto last = std::chrono::steady_clock::now();
  if (tty) {
    folder.progress = [&](size_t done, size_t all) {
      auto now = std::chrono::steady_clock::now();
      if (done != all && now - last < std::chrono::milliseconds(100)) return;
      last = now;
      std::fprintf(stderr, "\rreading stack files: %zu/%zu%s", done, all, done == all ? "\n" : "");
      std::fflush(stderr);
    };
  }
  auto t0 = std::chrono::steady_clock::now();
  xtimer::MergedStacks merged;
  if (!xtimer::MergeStackFolder(path, {.world_size = world}, folder, &merged, &error)) {
    std::fprintf(stderr, "xtimer_stacktrace_viewer: %s\n", error.c_str());
    return 2;
  }
  for (const xtimer::SkippedInput& s : merged.skipped)
    std::fprintf(stderr, "xtimer_stacktrace_viewer: skipped %s: %s\n", xtimer::PrintableName(s.source).c_str(),
                 xtimer::PrintableName(s.reason, 300).c_str());
  if (merged.ranks.empty()) {
    std::fprintf(stderr, "xtimer_stacktrace_viewer: no usable stack file (*.stacktrace) in %s%s\n", path.c_str(),
                 merged.skipped.empty() ? "" : " (all were skipped, see above)");
    return 2;
  }
  xtimer::Verdict verdict = xtimer::ComputeVerdict(merged);
  xtimer::OutputResult result;
  if (!xtimer::WriteMergeOutputs(merged, verdict, output, out, &result, &error)) {
    std::fprintf(stderr, "xtimer_stacktrace_viewer: %s\n", error.c_str());
    return 3;
  }
  for (const std::string& w : result.warnings) std::fprintf(stderr, "xtimer_stacktrace_viewer: %s\n", w.c_str());
  if (!quiet) {
    for (const std::string& line : verdict.summary) Say(line);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char buf[64];
    std::snprintf(buf, sizeof buf, " in %.2f s", s);
    Say("wrote " + std::to_string(result.written.size()) + " files (verdict.json, py_stack.*, cpp_stack.*) to " + out +
        buf);
  }
  return 0;
}
