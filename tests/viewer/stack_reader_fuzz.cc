// Fuzz target: any bytes as a stack file through the reader and, when accepted, the whole
// pipeline (merge, verdict, folded, flame graph, DOT text). Built with libFuzzer when the compiler
// is clang and XTIMER_FUZZ is on; the same file with corpus_replay_main.cc replays the kept corpus
// (tests/viewer/corpus) as an ordinary test under any compiler.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/stack_reader.h"
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
  if (!xtimer::ParseStackFile(bytes, &file, &error)) return 0;
  if (file.world_size > 4096) return 0;  // the merge is linear in the world size; keep runs fast
  xtimer::StackMerger merger;
  merger.Add(file, "fuzz", &error);
  // The same rank twice must be refused without harm.
  merger.Add(file, "fuzz-again", &error);
  xtimer::MergedStacks merged = std::move(merger).Finish();
  xtimer::Verdict verdict = xtimer::ComputeVerdict(merged);
  (void)xtimer::VerdictToJson(verdict);
  for (const xtimer::StackTree* tree : {&merged.python, &merged.native}) {
    for (bool collapse : {false, true}) {
      xtimer::TreeView view = xtimer::MakeTreeView(merged, *tree, {.collapse_idle = collapse});
      (void)xtimer::WriteFolded(view);
      (void)xtimer::WriteFlameSvg(view, {});
      (void)xtimer::WriteSpeedscope(view, "fuzz");
      (void)xtimer::WriteCallGraphDot(view, {});
    }
  }
  return 0;
}
