// Fuzz target: any bytes as a stack file through the reader (compared with the tests' reference
// reader) and,
// when accepted, the whole pipeline (merge, verdict, folded, flame graph, DOT text). Built with libFuzzer when the
// compiler is clang and XTIMER_FUZZ is on; the same file with corpus_replay_main.cc replays the kept corpus
// (tests/viewer/corpus) as an ordinary test under any compiler.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <cstdio>
#include <cstdlib>

#include <unistd.h>

#include <fstream>
#include <string>

#include "common/stacks/stack_file_threads.h"
#include "common/stacks/stack_reader.h"
#include "tests/viewer/reference_stack_reader.h"
#include "tests/viewer/stack_json.h"
#include "viewer/call_graph.h"
#include "viewer/flame_svg.h"
#include "viewer/folded_writer.h"
#include "viewer/speedscope_writer.h"
#include "viewer/stack_merger.h"
#include "viewer/verdict.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  xtimer::StackFile file;
  std::string error;
  bool ok = xtimer::ParseStackFile(bytes, &file, &error);
  if (size > 0) {
    // Differential: where both back ends accept a file they must read the same thing. (They may
    // disagree on acceptance: simdjson stops at depth 1024 and does not validate skipped values.)
    xtimer::StackFile other;
    std::string other_error;
    if (xtimer::stack_reader::ParseWithNlohmann(bytes, &other, &other_error) && ok &&
        xtimer::testing::StackFileToJson(file) != xtimer::testing::StackFileToJson(other)) {
      std::fprintf(stderr, "simdjson and nlohmann-json read this input differently\n");
      std::abort();
    }
  }
  {
    // The same bytes read thread by thread (common/stacks/stack_file_threads.h, forced even for small
    // inputs) must be accepted or refused as the whole parse does, with the same content and reason.
    static const std::string path = "/tmp/xtimer_stack_fuzz." + std::to_string(getpid()) + ".stacktrace";
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(size));
    xtimer::StackFileThreads split;
    std::string split_error;
    bool split_ok = split.Open(path, &split_error, {.whole_below = 0});
    xtimer::StackFile joined;
    if (split_ok) {
      joined = split.header();
      if (!split.whole()) {
        if (!split.ForEach([&](const xtimer::StackThread& t, size_t) { joined.threads.push_back(t); }, &split_error))
          std::abort();
      }
    }
    if (split_ok != ok || (ok && xtimer::testing::StackFileToJson(joined) != xtimer::testing::StackFileToJson(file)) ||
        (!ok && split_error != error)) {
      std::fprintf(stderr, "the thread-by-thread read differs from the whole parse: %s | %s\n", split_error.c_str(),
                   error.c_str());
      std::abort();
    }
  }
  if (!ok) return 0;
  if (file.world_size > 4096) return 0;  // the merge is linear in the world size; keep runs fast
  xtimer::StackMerger merger;
  merger.Add(file, "fuzz", &error);
  // The same rank twice must be refused without harm.
  merger.Add(file, "fuzz-again", &error);
  // Another rank with the threads in the opposite order and one frame fewer: the merger's
  // per-thread memo of the previous rank's frames meets stacks that differ.
  if (file.world_size >= 2) {
    xtimer::StackFile other = file;
    other.rank = (file.rank + 1) % file.world_size;
    std::reverse(other.threads.begin(), other.threads.end());
    for (xtimer::StackThread& t : other.threads) {
      if (!t.native.empty()) t.native.pop_back();
      if (!t.python.empty()) t.python.erase(t.python.begin());
    }
    merger.Add(other, "fuzz-other", &error);
  }
  xtimer::MergedStacks merged = std::move(merger).Finish();
  xtimer::Verdict verdict = xtimer::ComputeVerdict(merged);
  (void)xtimer::VerdictToJson(verdict);
  for (const xtimer::StackTree* tree : {&merged.python, &merged.native}) {
    for (bool collapse : {false, true}) {
      xtimer::TreeView view = xtimer::MakeTreeView(merged, *tree, {.collapse_idle = collapse});
      xtimer::StringSink out;
      xtimer::WriteFolded(view, out);
      xtimer::WriteFlameSvg(view, {}, out);
      xtimer::WriteSpeedscope(view, "fuzz", out);
      xtimer::WriteCallGraphDot(view, {}, out);
    }
  }
  return 0;
}
