// Unit tests of the pieces of the capture that need no threads: parsers, the JSON form of a
// dump, the ELF symbol lookup, and the symboliser on this very binary.
#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/stacks/stack_symbolize.h"
#include "common/stacks/symbolizer.h"
#include "preload/capture/elf_symtab.h"
#include "preload/capture/fault_guard.h"
#include "preload/capture/proc_info.h"
#include "preload/capture/python_capture.h"
#include "preload/capture/signal_spec.h"
#include "preload/capture/stack_dump.h"
#include "test_util.h"

namespace xtimer::capture {
namespace {

using nlohmann::json;

TEST(SignalSpec, NamesNumbersAndRealtimeOffsets) {
  EXPECT_EQ(ParseSignalSpec("SIGUSR2"), SIGUSR2);
  EXPECT_EQ(ParseSignalSpec("usr2"), SIGUSR2);
  EXPECT_EQ(ParseSignalSpec("12"), 12);
  EXPECT_EQ(ParseSignalSpec("SIGRTMIN+5"), SIGRTMIN + 5);
  EXPECT_EQ(ParseSignalSpec("RTMIN"), SIGRTMIN);
  EXPECT_EQ(ParseSignalSpec("SIGRTMAX-1"), SIGRTMAX - 1);
  EXPECT_EQ(ParseSignalSpec("none"), 0);
  EXPECT_EQ(ParseSignalSpec("off"), 0);
  EXPECT_EQ(ParseSignalSpec("SIGRTMIN+100"), -1);
  EXPECT_EQ(ParseSignalSpec("SIGRTMIN-1"), -1);
  EXPECT_EQ(ParseSignalSpec("SIGNOPE"), -1);
  EXPECT_EQ(ParseSignalSpec("999"), -1);
  EXPECT_EQ(ParseSignalSpec(""), -1);
  EXPECT_EQ(SignalName(SIGUSR2), "SIGUSR2");
  EXPECT_EQ(SignalName(SIGRTMIN + 5), "SIGRTMIN+5");
}

TEST(Faulthandler, ParsesThreadsRootFirst) {
  const char* text =
      "Thread 0x00007f7e298db6c0 (most recent call first):\n"
      "  File \"<string>\", line 3 in f\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 975 in run\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 1038 in _bootstrap_inner\n"
      "\n"
      "Current thread 0x00007f7e2a516b80 (most recent call first):\n"
      "  File \"/tmp/odd \", line 7\", line ??? in <module>\n"
      "  ...\n"
      "\n"
      "Thread 0x0000000000000001 (most recent call first):\n"
      "  <no Python frame>\n"
      "...\n";
  bool more = false;
  std::vector<PyThreadStack> stacks = ParseFaulthandlerText(text, &more);
  ASSERT_EQ(stacks.size(), 3u);
  EXPECT_TRUE(more);
  EXPECT_EQ(stacks[0].thread_id, 0x00007f7e298db6c0u);
  ASSERT_EQ(stacks[0].frames.size(), 3u);
  EXPECT_EQ(stacks[0].frames[0].function, "_bootstrap_inner");  // root first
  EXPECT_EQ(stacks[0].frames[0].line, 1038);
  EXPECT_EQ(stacks[0].frames[2].function, "f");
  EXPECT_EQ(stacks[0].frames[2].file, "<string>");
  EXPECT_EQ(stacks[1].thread_id, 0x00007f7e2a516b80u);
  ASSERT_EQ(stacks[1].frames.size(), 1u);
  EXPECT_EQ(stacks[1].frames[0].file, "/tmp/odd \", line 7");  // quotes are not escaped by CPython
  EXPECT_EQ(stacks[1].frames[0].line, -1);
  EXPECT_TRUE(stacks[1].truncated);
  EXPECT_TRUE(stacks[2].frames.empty());
}

TEST(Faulthandler, GarbageGivesNothing) {
  EXPECT_TRUE(ParseFaulthandlerText("").empty());
  EXPECT_TRUE(ParseFaulthandlerText("  File \"x\", line 1 in f\n").empty());  // no thread header
  auto s = ParseFaulthandlerText("Thread 0xzz\n  File \"x\", line\n  File \"y\", line 2 in g\n");
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].thread_id, 0u);
  ASSERT_EQ(s[0].frames.size(), 1u);
  EXPECT_EQ(s[0].frames[0].function, "g");
}

StackDump SampleDump() {
  StackDump d;
  d.rank = {2, 4, 2};
  d.host = "node-a";
  d.pid = 4242;
  d.reason = Reason::kHang;
  d.time = "2026-11-22T10:15:30.123Z";
  d.process_state = 'D';
  d.trigger = "ncclAllReduce #7 running for 3.0 s";
  InflightOp op;
  op.name = "ncclAllReduce";
  op.kind = OpKind::kCollective;
  op.stream = 0x5581a0c0;
  op.comm = "3a9f0c12";
  op.comm_rank = 2;
  op.comm_size = 4;
  op.seq = 7;
  op.bytes = 1024;
  op.running = true;
  op.in_flight_s = 3.0;
  d.inflight.push_back(op);
  InflightOp pending = op;
  pending.running = false;
  pending.blocked_by = 0;
  pending.comm.clear();
  pending.seq = 0;
  d.inflight.push_back(pending);
  d.modules.push_back({"/usr/bin/python3.11", "abcd"});
  ThreadDump t;
  t.tid = 4242;
  t.name = "python3";
  t.python_name = "MainThread";
  t.state = 'S';
  t.holds_gil = 1;
  t.captured = true;
  t.native = {{0, 0x1a2b0}, {-1, 0xdead}};
  t.python = {{"<module>", "train.py", 140}, {"train_step", "train.py", -1}};
  d.threads.push_back(t);
  ThreadDump lost;
  lost.tid = 4243;
  lost.name = "weird\"name\n";
  lost.error = "thread exited";
  d.threads.push_back(lost);
  d.python_unmatched.push_back({0x7f00, {{"f", "x.py", 1}}, true, "pool \"1\""});
  d.python = "3.11.2";
  d.python_thread_names = "ok";
  return d;
}

TEST(StackFile, JsonFollowsTheDocumentedFormat) {
  json j = json::parse(StackDumpToJson(SampleDump()));
  EXPECT_EQ(j["format"], "xtimer-stacktrace");
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["rank"], 2);
  EXPECT_EQ(j["world_size"], 4);
  EXPECT_EQ(j["local_rank"], 2);
  EXPECT_EQ(j["reason"], "hang");
  EXPECT_EQ(j["symbolized"], false);
  EXPECT_EQ(j["process_state"]["code"], "D");
  EXPECT_NE(j["process_state"]["name"].get<std::string>().find("uninterruptible"), std::string::npos);
  EXPECT_EQ(j["trigger"], "ncclAllReduce #7 running for 3.0 s");
  ASSERT_EQ(j["inflight_ops"].size(), 2u);
  EXPECT_EQ(j["inflight_ops"][0]["stream"], "0x5581a0c0");
  EXPECT_EQ(j["inflight_ops"][0]["seq"], 7);
  EXPECT_EQ(j["inflight_ops"][0]["state"], "running");
  EXPECT_FALSE(j["inflight_ops"][0].contains("blocked_by"));
  EXPECT_EQ(j["inflight_ops"][1]["state"], "pending");
  EXPECT_EQ(j["inflight_ops"][1]["blocked_by"], 0);
  EXPECT_FALSE(j["inflight_ops"][1].contains("comm"));  // fields that do not apply are omitted
  EXPECT_FALSE(j["inflight_ops"][1].contains("seq"));
  const json& t = j["threads"][0];
  EXPECT_EQ(t["tid"], 4242);
  EXPECT_EQ(t["main"], true);
  EXPECT_EQ(t["holds_gil"], true);
  EXPECT_EQ(t["name"], "python3");
  EXPECT_EQ(t["python_name"], "MainThread");
  EXPECT_EQ(j["capture"]["python_thread_names"], "ok");
  EXPECT_EQ(t["native"][0]["module"], "/usr/bin/python3.11");
  EXPECT_EQ(t["native"][0]["offset"], "0x1a2b0");
  EXPECT_EQ(t["native"][1]["module"], "[unknown]");
  EXPECT_EQ(t["python"][0]["function"], "<module>");
  EXPECT_TRUE(t["python"][1]["line"].is_null());
  const json& lost = j["threads"][1];
  EXPECT_EQ(lost["main"], false);
  EXPECT_TRUE(lost["holds_gil"].is_null());
  EXPECT_EQ(lost["captured"], false);
  EXPECT_EQ(lost["error"], "thread exited");
  EXPECT_EQ(lost["name"], "weird\"name\n");
  EXPECT_FALSE(lost.contains("python_name"));  // none: omitted
  EXPECT_EQ(j["modules"][0]["build_id"], "abcd");
  EXPECT_EQ(j["python_unmatched"][0]["thread_id"], "0x7f00");
  EXPECT_EQ(j["python_unmatched"][0]["python_name"], "pool \"1\"");
  EXPECT_EQ(StackFileName({2, 4, -1}), "00002-00004.stacktrace");
}

// The guard the Python readers read through: mapped memory is read, an unmapped or inaccessible
// address is a failed read (not a crash), and the process's own fault handler is back afterwards.
void CountingSegv(int) {}

TEST(FaultGuard, ReadsWhatIsMappedAndFailsOnWhatIsNot) {
  struct sigaction mine {
  }, before{}, after{};
  mine.sa_handler = CountingSegv;
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(sigaction(SIGSEGV, &mine, &before), 0);
  const long page = sysconf(_SC_PAGESIZE);
  void* none = mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* gone = mmap(nullptr, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(none, MAP_FAILED);
  ASSERT_NE(gone, MAP_FAILED);
  munmap(gone, page);
  const uint64_t value = 0x1122334455667788u;
  {
    FaultGuard guard;
    ASSERT_TRUE(guard.installed());
    uint64_t got = 0;
    EXPECT_TRUE(guard.Copy(&got, reinterpret_cast<uintptr_t>(&value), sizeof got));
    EXPECT_EQ(got, value);
    EXPECT_FALSE(guard.Copy(&got, reinterpret_cast<uintptr_t>(none), sizeof got));
    EXPECT_FALSE(guard.Copy(&got, reinterpret_cast<uintptr_t>(gone), sizeof got));
    EXPECT_FALSE(guard.Copy(&got, 0, sizeof got));
    // Reads keep working after faults, and Run reports a fault inside its function.
    for (int i = 0; i < 3; ++i) EXPECT_FALSE(guard.Copy(&got, reinterpret_cast<uintptr_t>(none), 1));
    EXPECT_TRUE(guard.Copy(&got, reinterpret_cast<uintptr_t>(&value), sizeof got));
    EXPECT_FALSE(guard.Run([&] { got = *static_cast<volatile uint64_t*>(none); }));
    EXPECT_TRUE(guard.Run([&] { got = 1; }));
  }
  ASSERT_EQ(sigaction(SIGSEGV, &before, &after), 0);
  EXPECT_EQ(after.sa_handler, CountingSegv);
  munmap(none, page);
}

// A function defined in this binary, hidden from the dynamic table, found in .symtab.
extern "C" __attribute__((noinline, used)) int xtimer_test_local_symbol(int x) { return x * 3 + 1; }

TEST(ElfSymtab, FindsLocalSymbolsAndRejectsGarbage) {
  const char* names[] = {"xtimer_test_local_symbol", "no_such_symbol_anywhere"};
  uint64_t values[2] = {0, 0};
  std::string error;
  ASSERT_TRUE(LookupElfSymbols("/proc/self/exe", names, values, &error)) << error;
  Dl_info info;
  link_map* lm = nullptr;
  ASSERT_NE(dladdr1(reinterpret_cast<void*>(&xtimer_test_local_symbol), &info, reinterpret_cast<void**>(&lm),
                    RTLD_DL_LINKMAP),
            0);
  EXPECT_EQ(lm->l_addr + values[0], reinterpret_cast<uintptr_t>(&xtimer_test_local_symbol));
  EXPECT_EQ(values[1], 0u);
  testing::ScopedDir scoped("elf");
  const std::string& dir = scoped.path();
  std::string bad = dir + "/bad.so";
  FILE* f = fopen(bad.c_str(), "w");
  fputs(
      "\x7f"
      "ELF garbage that is not an object",
      f);
  fclose(f);
  EXPECT_FALSE(LookupElfSymbols(bad, names, values, &error));
  EXPECT_FALSE(LookupElfSymbols(dir + "/missing.so", names, values, &error));
}

// ---- symboliser: an always-inline function inside a noinline one, in this binary.
__attribute__((noinline)) uint64_t ReturnAddress() {
  return reinterpret_cast<uint64_t>(__builtin_extract_return_addr(__builtin_return_address(0)));
}
volatile int g_inline_sink = 0;
static inline __attribute__((always_inline)) uint64_t InlinedLeafForTest() {
  g_inline_sink = 1;  // real work on both sides of the call, so the inlined body owns the call
  uint64_t r = ReturnAddress();
  g_inline_sink = 2;
  return r;
}
__attribute__((noinline)) uint64_t OuterForTest() {
  uint64_t r = InlinedLeafForTest();
  asm volatile("" ::: "memory");  // keep the call from becoming a tail call
  return r;
}

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Module path and ELF vaddr of a code address in this process.
void Locate(uint64_t address, std::string* module, uint64_t* vaddr) {
  ModuleMap map;
  map.Build();
  int m = -1;
  ASSERT_TRUE(map.Find(address, &m, vaddr));
  *module = map.modules()[m].path;
}

TEST(Symbolizer, ResolvesFunctionLineAndInlinedFrames) {
  uint64_t ret = OuterForTest();
  std::string module;
  uint64_t vaddr = 0;
  Locate(ret - 1, &module, &vaddr);  // inside the call instruction, as the capture records callers
  Symbolizer sym;
  const auto& frames = sym.Resolve(module, vaddr);
  ASSERT_GE(frames.size(), 2u) << sym.ModuleError(module);
  EXPECT_NE(frames[0].function.find("OuterForTest"), std::string::npos) << frames[0].function;
  EXPECT_FALSE(frames[0].inlined);
  EXPECT_NE(frames[1].function.find("InlinedLeafForTest"), std::string::npos) << frames[1].function;
  EXPECT_TRUE(frames[1].inlined);
  EXPECT_NE(frames[1].file.find("capture_unit_test.cc"), std::string::npos);
  EXPECT_GT(frames[1].line, 0);
  EXPECT_GT(frames[0].line, 0);  // the line in OuterForTest where the leaf was inlined
  // Cached: same vector again.
  EXPECT_EQ(&sym.Resolve(module, vaddr), &frames);
}

TEST(Symbolizer, UnknownModulesAndStaleBuildIdsResolveNothing) {
  Symbolizer sym;
  EXPECT_TRUE(sym.Resolve("/nonexistent/lib.so", 0x1000).empty());
  EXPECT_FALSE(sym.ModuleError("/nonexistent/lib.so").empty());
  EXPECT_TRUE(sym.Resolve("[vdso]", 0x10).empty());
  uint64_t ret = OuterForTest();
  std::string module;
  uint64_t vaddr = 0;
  Locate(ret - 1, &module, &vaddr);
  Symbolizer sym2;
  EXPECT_TRUE(sym2.Resolve(module, vaddr, "0123456789").empty());
  EXPECT_NE(sym2.ModuleError(module).find("build-id"), std::string::npos);
}

// The symboliser opens a module itself and hands elfutils that descriptor: a module that is not
// ELF is refused and its descriptor closed, one that is ELF is closed with the symboliser.
TEST(Symbolizer, ClosesEveryModuleItOpened) {
  auto open_fds = [] {
    size_t n = 0;
    for (auto& e : std::filesystem::directory_iterator("/proc/self/fd")) n += e.path().filename() != "." ? 1 : 0;
    return n;
  };
  std::string text = std::filesystem::temp_directory_path() / ("xtimer_not_elf." + std::to_string(getpid()));
  std::ofstream(text) << "not an ELF object\n";
  uint64_t ret = OuterForTest();
  std::string module;
  uint64_t vaddr = 0;
  Locate(ret - 1, &module, &vaddr);
  size_t before = open_fds();
  for (int i = 0; i < 20; ++i) {
    Symbolizer sym;
    EXPECT_TRUE(sym.Resolve(text, 0x10).empty());
    EXPECT_NE(sym.ModuleError(text).find("not a valid ELF file"), std::string::npos) << sym.ModuleError(text);
    EXPECT_FALSE(sym.Resolve(module, vaddr).empty());
  }
  EXPECT_EQ(open_fds(), before);
  std::filesystem::remove(text);
}

// ---- tail calls: the jumper ends with a jump to the target (at -O2), so the target returns
// straight into the caller and the jumper leaves no frame.
extern "C" __attribute__((noinline)) uint64_t xtimer_test_tail_target() {
  return reinterpret_cast<uint64_t>(__builtin_extract_return_addr(__builtin_return_address(0)));
}
extern "C" __attribute__((noinline)) uint64_t xtimer_test_tail_jumper() {
  g_inline_sink = 3;
  return xtimer_test_tail_target();
}
extern "C" __attribute__((noinline)) uint64_t xtimer_test_tail_caller() {
  uint64_t r = xtimer_test_tail_jumper();
  asm volatile("" ::: "memory");  // a real call here: the caller keeps its frame
  return r;
}

TEST(Symbolizer, FindsFunctionsThatLeftNoFrameThroughATailCall) {
  uint64_t ret = xtimer_test_tail_caller();
  CodeLocation caller, callee;
  Locate(ret - 1, &caller.module, &caller.offset);
  Locate(reinterpret_cast<uint64_t>(&xtimer_test_tail_target), &callee.module, &callee.offset);
  Symbolizer sym;
  ASSERT_FALSE(sym.Resolve(caller.module, caller.offset).empty()) << sym.ModuleError(caller.module);
  const std::string holder = sym.Resolve(caller.module, caller.offset).front().function;
  if (holder != "xtimer_test_tail_caller") GTEST_SKIP() << "the compiler made a real call (" << holder << ")";
  const std::vector<CodeLocation>& hops = sym.TailCalls(caller, callee);
  ASSERT_EQ(hops.size(), 1u);
  EXPECT_EQ(hops[0].module, caller.module);
  ASSERT_FALSE(sym.Resolve(hops[0].module, hops[0].offset).empty());
  EXPECT_EQ(sym.Resolve(hops[0].module, hops[0].offset).front().function, "xtimer_test_tail_jumper");
  EXPECT_EQ(&sym.TailCalls(caller, callee), &hops);  // cached

  // A direct call has nothing in between; neither has a pair where the outer frame is no call.
  uint64_t direct = OuterForTest();
  CodeLocation outer, inner;
  Locate(direct - 1, &outer.module, &outer.offset);
  Locate(reinterpret_cast<uint64_t>(&ReturnAddress), &inner.module, &inner.offset);
  EXPECT_TRUE(sym.TailCalls(outer, inner).empty());
  EXPECT_TRUE(sym.TailCalls(callee, caller).empty());
  EXPECT_TRUE(sym.TailCalls({"/nonexistent/lib.so", 0x1000}, callee).empty());

  // The stack-file rewriter puts the jumper between the two frames, marked tail_call.
  json j = {{"format", "xtimer-stacktrace"},
            {"version", 1},
            {"threads", json::array({{{"tid", 1},
                                      {"native", json::array({
                                                     {{"module", caller.module}, {"offset", Hex(caller.offset)}},
                                                     {{"module", callee.module}, {"offset", Hex(callee.offset)}},
                                                 })}}})}};
  std::string out, error;
  SymbolizeSummary summary;
  ASSERT_TRUE(SymbolizeStackJson(j.dump(), sym, &out, &summary, &error)) << error;
  json native = json::parse(out)["threads"][0]["native"];
  ASSERT_EQ(native.size(), 3u) << native.dump();
  EXPECT_EQ(native[0]["function"], "xtimer_test_tail_caller");
  EXPECT_EQ(native[1]["function"], "xtimer_test_tail_jumper");
  EXPECT_EQ(native[1]["tail_call"], true);
  EXPECT_EQ(native[2]["function"], "xtimer_test_tail_target");
  EXPECT_FALSE(native[0].contains("tail_call"));
  EXPECT_EQ(summary.frames, 2);  // the frames in the file; the found ones are extra
}

TEST(Symbolizer, Demangles) {
  EXPECT_EQ(Demangle("_ZN6xtimer4TestEv"), "xtimer::Test()");
  EXPECT_EQ(Demangle("main"), "main");
  EXPECT_EQ(Demangle("_Znot valid"), "_Znot valid");
}

TEST(StackSymbolize, ExpandsFramesAndKeepsTheRest) {
  uint64_t ret = OuterForTest();
  std::string module;
  uint64_t vaddr = 0;
  Locate(ret - 1, &module, &vaddr);
  char off[32];
  snprintf(off, sizeof off, "0x%llx", static_cast<unsigned long long>(vaddr));
  json in = {{"format", "xtimer-stacktrace"},
             {"version", 1},
             {"symbolized", false},
             {"future_field", {1, 2}},
             {"threads", json::array({{{"tid", 1},
                                       {"native", json::array({{{"module", module}, {"offset", off}},
                                                               {{"module", "/nonexistent.so"}, {"offset", "0x10"}},
                                                               {{"module", module}, {"offset", "zz"}}})},
                                       {"python", json::array()}}})}};
  Symbolizer sym;
  std::string out, error;
  SymbolizeSummary summary;
  ASSERT_TRUE(SymbolizeStackJson(in.dump(), sym, &out, &summary, &error)) << error;
  json j = json::parse(out);
  EXPECT_EQ(j["symbolized"], true);
  EXPECT_EQ(j["future_field"], json({1, 2}));
  const json& native = j["threads"][0]["native"];
  ASSERT_GE(native.size(), 4u);  // 2 (outer + inlined) + 2 unresolved kept
  EXPECT_NE(native[0]["function"].get<std::string>().find("OuterForTest"), std::string::npos);
  EXPECT_EQ(native[0]["inlined"], false);
  EXPECT_EQ(native[0]["offset"], off);
  EXPECT_EQ(native[1]["inlined"], true);
  EXPECT_EQ(native[1]["offset"], off);  // same offset for the inlined frames
  EXPECT_FALSE(native[native.size() - 2].contains("function"));
  EXPECT_EQ(native[native.size() - 2]["module"], "/nonexistent.so");
  EXPECT_EQ(native.back()["offset"], "zz");
  EXPECT_EQ(summary.frames, 3);
  EXPECT_EQ(summary.resolved, 1);
  EXPECT_EQ(summary.module_errors.count("/nonexistent.so"), 1u);
}

TEST(StackSymbolize, RejectsBadInputWithoutTouchingTheFile) {
  Symbolizer sym;
  std::string out, error;
  SymbolizeSummary summary;
  EXPECT_FALSE(
      SymbolizeStackJson("{\"format\": \"xtimer-stacktrace\", \"version\": 1, \"thr", sym, &out, &summary, &error));
  EXPECT_NE(error.find("JSON"), std::string::npos);
  EXPECT_FALSE(SymbolizeStackJson(R"({"format":"other","version":1,"threads":[]})", sym, &out, &summary, &error));
  EXPECT_FALSE(
      SymbolizeStackJson(R"({"format":"xtimer-stacktrace","version":7,"threads":[]})", sym, &out, &summary, &error));
  EXPECT_NE(error.find("newer"), std::string::npos);
  EXPECT_FALSE(SymbolizeStackJson(R"({"format":"xtimer-stacktrace","version":1})", sym, &out, &summary, &error));
  // Frames of the wrong shape are kept as they are.
  ASSERT_TRUE(
      SymbolizeStackJson(R"({"format":"xtimer-stacktrace","version":1,"threads":[{"native":[1,"x",{"module":5}]}, 3]})",
                         sym, &out, &summary, &error))
      << error;
  EXPECT_EQ(json::parse(out)["threads"][0]["native"], json::parse(R"([1,"x",{"module":5}])"));

  testing::ScopedDir scoped("symfile");
  const std::string& dir = scoped.path();
  std::string path = dir + "/00000-00001.stacktrace";
  {
    FILE* f = fopen(path.c_str(), "w");
    fputs("{\"format\":\"xtimer-stacktrace\",\"version\":1,\"threads\":[{\"native\":[", f);  // truncated
    fclose(f);
  }
  std::string before = testing::ReadFile(path);
  EXPECT_FALSE(SymbolizeStackFile(path, sym, &summary, &error));
  EXPECT_NE(error.find(path), std::string::npos);  // names the file
  EXPECT_EQ(testing::ReadFile(path), before);
  EXPECT_FALSE(SymbolizeStackFile(dir + "/missing", sym, &summary, &error));
  EXPECT_FALSE(SymbolizeStackFile(dir, sym, &summary, &error));  // a folder
}

}  // namespace
}  // namespace xtimer::capture
