// Native stacks as complete as gdb's. Runs unwind_target (one build of it, given with
// --target=PATH), dumps it with the dump signal as the product does (the dumper writes the stack
// file, xtimer_symbolize rewrites it), then attaches `gdb -batch -p PID -ex 'thread apply all bt'`
// and compares thread by thread: every function gdb shows in the program's threads must appear in
// ours, in the same order (ours may have more: gdb stops at main, and misses some tail calls
// across libraries that we find). A function has several names in libc (read, __libc_read,
// __GI___libc_read): a gdb frame matches ours when its name is one of the ELF names at the entry
// of our frame's function. Independently of gdb, each thread must show the program's own chain
// of functions (the sem_wait thread's tail-calling leaf included). The main thread may be caught
// still inside the dump signal's handler: gdb's frames then sit below those, as they should.
//
// Exit 77 (ctest: skipped) where gdb is missing or ptrace is not allowed here.
#include <elfutils/libdwfl.h>
#include <gelf.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

extern char** environ;

namespace xtimer::capture {
namespace {

using nlohmann::json;

std::string g_target;  // --target=PATH

struct Frame {
  std::string function;  // "" when unknown
  std::string module;    // ours only
  uint64_t offset = 0;   // ours only
  bool inlined = false;  // ours only
  bool tail_call = false;
  std::string file;  // source file, when known
  int line = 0;
};
using Stack = std::vector<Frame>;  // innermost first

// "pthread_cond_wait@@GLIBC_2.3.2" -> "pthread_cond_wait", "f.constprop.0" -> "f",
// "ns::f(int) const" -> "ns::f": the spellings gdb and our symboliser may differ in.
std::string Normalize(std::string name) {
  if (size_t at = name.find('@'); at != std::string::npos && at > 0) name.resize(at);
  if (name.ends_with(" const")) name.resize(name.size() - 6);
  if (!name.empty() && name.back() == ')') {
    int depth = 0;
    for (size_t i = name.size(); i-- > 0;) {
      if (name[i] == ')') ++depth;
      if (name[i] == '(' && --depth == 0) {
        name.resize(i);
        break;
      }
    }
  }
  if (name.find_first_of("<:") == std::string::npos) {
    if (size_t dot = name.find('.'); dot != std::string::npos && dot > 0) name.resize(dot);
  }
  return name;
}

// Every ELF name of the function holding an address (all symbols at its entry), normalised.
class AliasIndex {
 public:
  ~AliasIndex() {
    for (auto& [path, m] : modules_)
      if (m.dwfl != nullptr) dwfl_end(m.dwfl);
  }
  std::set<std::string> Names(const std::string& path, uint64_t offset) {
    std::set<std::string> out;
    Module& m = Open(path);
    if (m.mod == nullptr) return out;
    GElf_Off off = 0;
    GElf_Sym sym;
    const char* name = dwfl_module_addrinfo(m.mod, offset + m.bias, &off, &sym, nullptr, nullptr, nullptr);
    if (name == nullptr) return out;
    out.insert(Normalize(name));
    auto range = m.by_entry.equal_range(offset + m.bias - off);
    for (auto it = range.first; it != range.second; ++it) out.insert(it->second);
    return out;
  }

  // Whether the code at `offset` in `path` starts with `bytes` (read from the file).
  bool CodeIs(const std::string& path, uint64_t offset, const std::vector<unsigned char>& bytes) {
    Module& m = Open(path);
    GElf_Addr bias = 0;
    Elf* elf = m.mod != nullptr ? dwfl_module_getelf(m.mod, &bias) : nullptr;
    size_t nphdr = 0, size = 0;
    const char* image = elf != nullptr ? elf_rawfile(elf, &size) : nullptr;
    if (image == nullptr || elf_getphdrnum(elf, &nphdr) != 0) return false;
    for (size_t i = 0; i < nphdr; ++i) {
      GElf_Phdr ph;
      if (gelf_getphdr(elf, static_cast<int>(i), &ph) == nullptr || ph.p_type != PT_LOAD) continue;
      if (offset < ph.p_vaddr || offset + bytes.size() > ph.p_vaddr + ph.p_filesz) continue;
      const uint64_t at = offset - ph.p_vaddr + ph.p_offset;
      return at + bytes.size() <= size && std::memcmp(image + at, bytes.data(), bytes.size()) == 0;
    }
    return false;
  }

 private:
  struct Module {
    Dwfl* dwfl = nullptr;
    Dwfl_Module* mod = nullptr;
    GElf_Addr bias = 0;
    std::multimap<GElf_Addr, std::string> by_entry;
  };
  Module& Open(const std::string& path) {
    auto it = modules_.find(path);
    if (it != modules_.end()) return it->second;
    Module& m = modules_[path];
    static char* debuginfo_path = nullptr;
    static const Dwfl_Callbacks callbacks = {nullptr, dwfl_standard_find_debuginfo, dwfl_offline_section_address,
                                             &debuginfo_path};
    m.dwfl = dwfl_begin(&callbacks);
    if (m.dwfl == nullptr) return m;
    dwfl_report_begin(m.dwfl);
    m.mod = dwfl_report_offline(m.dwfl, path.c_str(), path.c_str(), -1);
    dwfl_report_end(m.dwfl, nullptr, nullptr);
    if (m.mod == nullptr || dwfl_module_getelf(m.mod, &m.bias) == nullptr) {
      m.mod = nullptr;
      return m;
    }
    int n = dwfl_module_getsymtab(m.mod);
    for (int i = 1; i < n; ++i) {
      GElf_Sym sym;
      GElf_Addr addr = 0;
      const char* s = dwfl_module_getsym_info(m.mod, i, &sym, &addr, nullptr, nullptr, nullptr);
      if (s != nullptr && *s != '\0' && GELF_ST_TYPE(sym.st_info) == STT_FUNC) m.by_entry.emplace(addr, Normalize(s));
    }
    return m;
  }
  std::map<std::string, Module> modules_;
};

// gdb's "thread apply all bt", by LWP: frames innermost first, "" for "??" and the
// "<signal handler called>" pseudo-frame left out.
std::map<int, Stack> ParseGdb(const std::string& text, std::map<int, std::string>* names) {
  std::map<int, Stack> out;
  Stack* current = nullptr;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    // Thread 3 (Thread 0x7f2fe82d16c0 (LWP 4048) "t-sem"):
    if (line.starts_with("Thread ") && line.find("(LWP ") != std::string::npos) {
      const int lwp = std::atoi(line.c_str() + line.find("(LWP ") + 5);
      current = &out[lwp];
      size_t q1 = line.find('"'), q2 = line.rfind('"');
      (*names)[lwp] = q1 != std::string::npos && q2 > q1 ? line.substr(q1 + 1, q2 - q1 - 1) : "";
      continue;
    }
    // #2  0x00007f.. in __GI___futex_abstimed_wait_cancelable64 (futex_word=...) at ./nptl/futex-internal.c:139
    // #0  __futex_abstimed_wait_common64 (private=...) at ./nptl/futex-internal.c:57
    if (current == nullptr || !line.starts_with("#")) continue;
    if (line.find("<signal handler called>") != std::string::npos) continue;
    size_t p = line.find_first_of(" \t");
    p = line.find_first_not_of(" \t", p);
    if (p == std::string::npos) continue;
    if (line.compare(p, 2, "0x") == 0) {
      size_t in = line.find(" in ", p);
      if (in == std::string::npos) continue;
      p = in + 4;
    }
    Frame f;
    size_t args = line.find(" (", p);
    std::string function = line.substr(p, args == std::string::npos ? std::string::npos : args - p);
    if (function != "??") f.function = function;
    size_t at = line.rfind(" at ");
    size_t colon = line.rfind(':');
    if (at != std::string::npos && colon != std::string::npos && colon > at) {
      f.file = line.substr(at + 4, colon - at - 4);
      f.line = std::atoi(line.c_str() + colon + 1);
    }
    current->push_back(f);
  }
  return out;
}

std::map<int, Stack> ParseOurs(const json& j, std::map<int, std::string>* names) {
  std::map<int, Stack> out;
  for (const auto& t : j["threads"]) {
    int tid = t["tid"];
    (*names)[tid] = t.value("name", "");
    Stack& s = out[tid];
    for (const auto& f : t["native"]) {
      Frame fr;
      fr.function = f.value("function", "");
      fr.module = f.value("module", "");
      std::string off = f.value("offset", "0x0");
      fr.offset = std::stoull(off, nullptr, 16);
      fr.inlined = f.value("inlined", false);
      fr.tail_call = f.value("tail_call", false);
      fr.file = f.value("file", "");
      fr.line = f.value("line", 0);
      s.insert(s.begin(), fr);  // the file is root first
    }
  }
  return out;
}

std::string Show(const Stack& s) {
  std::string out;
  for (const Frame& f : s)
    out += "    " + (f.function.empty() ? "??" : f.function) + (f.inlined ? " [inlined]" : "") +
           (f.tail_call ? " [tail call]" : "") + (f.line > 0 ? " :" + std::to_string(f.line) : "") + "\n";
  return out;
}

// Runs a command, returns what it printed (stdout + stderr).
std::string RunCommand(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

// The target process: started with its stdout on a pipe, killed at the end.
class Target {
 public:
  ~Target() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) close(out_);
  }
  bool Start(const std::string& dir) {
    int fds[2];
    if (pipe(fds) != 0) return false;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    char* argv[] = {const_cast<char*>(g_target.c_str()), const_cast<char*>(dir.c_str()), nullptr};
    int rc = posix_spawn(&pid_, g_target.c_str(), &fa, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    out_ = fds[0];
    return rc == 0;
  }
  // Waits for "ready <pid>".
  bool WaitReady(int timeout_ms) {
    std::string got;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (got.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[256];
      ssize_t n = read(out_, buf, sizeof buf);
      if (n <= 0) return false;
      got.append(buf, static_cast<size_t>(n));
    }
    return got.starts_with("ready ");
  }
  // Every thread asleep in the kernel (its blocking call reached).
  bool WaitAllSleeping(int timeout_ms) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      bool all = true;
      int n = 0;
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid_) + "/task", ec)) {
        std::string stat = testing::ReadFile(e.path().string() + "/stat");
        size_t paren = stat.rfind(')');
        if (paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'S') all = false;
        ++n;
      }
      if (all && n >= 10) return true;  // main, the dumper and the 8 parked threads
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
};

// The program's own functions each thread must show, innermost first (gdb or not). -O2 turns
// xt_sem_leaf's call into a jump: only the tail-call search finds it.
const std::map<std::string, std::vector<std::string>> kOwnChains = {
    {"t-sem", {"xt_sem_leaf", "xt_sem_mid", "xt_sem_thread"}},
    {"t-cond", {"xt_cond_leaf", "xt_cond_thread"}},
    {"t-read", {"xt_read_leaf", "xt_read_inlined", "xt_read_mid", "xt_read_thread"}},
    {"t-select", {"xt_select_leaf", "xt_select_thread"}},
    {"t-sleep", {"xt_sleep_leaf", "xt_sleep_thread"}},
    {"t-epoll", {"xt_epoll_leaf", "xt_epoll_thread"}},
    {"t-recurse",
     {"xt_recurse", "xt_recurse", "xt_recurse", "xt_recurse", "xt_recurse", "xt_recurse", "xt_recurse",
      "xt_recurse_thread"}},
    {"t-signal", {"xt_handler_body", "xt_signal_handler", "xt_raise_leaf", "xt_signal_thread"}},
};

// Whether `want` (names) appears in `have` in order; *missing names the first that does not.
template <typename Match>
bool InOrder(const std::vector<std::string>& want, const Stack& have, Match match, std::string* missing) {
  size_t k = 0;
  for (const std::string& w : want) {
    while (k < have.size() && !match(w, have[k])) ++k;
    if (k == have.size()) {
      *missing = w;
      return false;
    }
    ++k;
  }
  return true;
}

TEST(UnwindVsGdb, EveryFunctionGdbShowsIsInOursInOrder) {
  ASSERT_FALSE(g_target.empty()) << "run with --target=PATH";
  testing::ScopedDir dir("unwind-gdb");
  ASSERT_FALSE(dir.path().empty());
  Target target;
  ASSERT_TRUE(target.Start(dir.path())) << g_target;
  ASSERT_TRUE(target.WaitReady(30000)) << "the target did not start";
  ASSERT_TRUE(target.WaitAllSleeping(10000)) << "the target's threads did not all block";

  // 1. Our dump, as the product takes it: the dump signal, then xtimer_symbolize.
  ASSERT_EQ(kill(target.pid(), SIGUSR2), 0);
  const std::string file = dir.path() + "/00000-00001.stacktrace";
  json ours_json = testing::WaitSymbolized(file, 60);
  ASSERT_FALSE(ours_json.is_discarded()) << "no stack file " << file;
  ASSERT_TRUE(ours_json.value("symbolized", false)) << "not symbolised: " << file;
  ASSERT_TRUE(target.WaitAllSleeping(10000)) << "a thread did not go back to its blocking call";

  // 2. gdb on the same process, threads back where they were.
  const std::string gdb_text = RunCommand("timeout 120 gdb -batch -nx -iex 'set debuginfod enabled off' -p " +
                                          std::to_string(target.pid()) + " -ex 'thread apply all bt'");
  if (gdb_text.find("Operation not permitted") != std::string::npos) GTEST_SKIP() << "gdb cannot attach here";

  std::map<int, std::string> gdb_names, our_names;
  std::map<int, Stack> gdb = ParseGdb(gdb_text, &gdb_names);
  std::map<int, Stack> ours = ParseOurs(ours_json, &our_names);
  ASSERT_GE(gdb.size(), 10u) << gdb_text;

  AliasIndex aliases;
  auto same_function = [&](const std::string& gdb_name, const Frame& f) {
    if (f.function.empty()) return false;
    const std::string want = Normalize(gdb_name);
    if (Normalize(f.function) == want) return true;
    return !f.inlined && !f.module.empty() && aliases.Names(f.module, f.offset).count(want) > 0;
  };

  int compared_threads = 0, gdb_frames = 0, extra_frames = 0;
  std::map<std::string, int> extra_by_name;  // frames we show that gdb does not, by name
  std::map<std::string, int> renamed;        // gdb's name = ours, where they are aliases
  for (const auto& [tid, name] : our_names) {
    const bool program_thread = name.starts_with("t-") || tid == target.pid();
    if (!program_thread) continue;
    ASSERT_TRUE(gdb.count(tid)) << "gdb does not list thread " << tid << " (" << name << ")";
    const Stack& g = gdb[tid];
    const Stack& o = ours[tid];
    std::vector<std::string> want;
    for (const Frame& f : g)
      if (!f.function.empty()) want.push_back(f.function);
    std::string missing;
    EXPECT_TRUE(InOrder(want, o, same_function, &missing))
        << "thread " << name << ": gdb's " << missing << " is not in ours (in order)\ngdb:\n"
        << Show(g) << "ours:\n"
        << Show(o);
    // The program's own frames name the same line as gdb's (a caller's is its call's line,
    // the interrupted frame's the line it stopped at).
    {
      size_t k = 0;
      for (const Frame& gf : g) {
        if (gf.function.empty()) continue;
        while (k < o.size() && !same_function(gf.function, o[k])) ++k;
        if (k == o.size()) break;
        if (gf.file.ends_with("unwind_target.cc") && o[k].line > 0) {
          EXPECT_EQ(o[k].line, gf.line) << "thread " << name << ", " << gf.function << "\n" << Show(o);
        }
        ++k;
      }
    }
    auto chain = kOwnChains.find(name);
    if (chain != kOwnChains.end()) {
      EXPECT_TRUE(InOrder(
          chain->second, o, [](const std::string& w, const Frame& f) { return f.function == w; }, &missing))
          << "thread " << name << ": " << missing << " missing from ours\n"
          << Show(o);
    }
    if (name == "t-signal") {
      // Between the handler and the code it interrupted: the signal trampoline, at its exact
      // address (mov $15,%rax; syscall: rt_sigreturn), not one byte before it.
      size_t h = 0;
      while (h < o.size() && o[h].function != "xt_signal_handler") ++h;
      ASSERT_LT(h + 1, o.size()) << Show(o);
      EXPECT_TRUE(aliases.CodeIs(o[h + 1].module, o[h + 1].offset, {0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05}))
          << "the frame after the handler is not the signal trampoline: " << o[h + 1].function << " " << o[h + 1].module
          << "+" << std::hex << o[h + 1].offset;
    }
    ++compared_threads;
    gdb_frames += static_cast<int>(want.size());
    // What we show beyond gdb (for the README's count): frames no gdb frame matched.
    size_t k = 0;
    for (const Frame& f : o) {
      if (k < want.size() && same_function(want[k], f)) {
        if (Normalize(want[k]) != Normalize(f.function)) ++renamed[want[k] + " = " + f.function];
        ++k;
        continue;
      }
      ++extra_frames;
      ++extra_by_name[(f.function.empty() ? "??" : f.function) + (f.tail_call ? " [tail call]" : "")];
    }
  }
  EXPECT_EQ(compared_threads, 9);
  std::printf("%s: %d threads, %d gdb frames all found in ours; ours has %d more:\n", g_target.c_str(),
              compared_threads, gdb_frames, extra_frames);
  for (const auto& [n, count] : extra_by_name) std::printf("  %3d x %s\n", count, n.c_str());
  std::printf("named differently (gdb = ours, the same function):\n");
  for (const auto& [n, count] : renamed) std::printf("  %3d x %s\n", count, n.c_str());
}

}  // namespace
}  // namespace xtimer::capture

// 77 = skipped (ctest SKIP_RETURN_CODE) when gdb or ptrace is not available.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--target=", 9) == 0) xtimer::capture::g_target = argv[i] + 9;
  }
  if (xtimer::capture::RunCommand("gdb --version").find("GNU gdb") == std::string::npos) {
    std::printf("gdb not found: skipped\n");
    return 77;
  }
  // Can a process attach to a sibling that allows it (as gdb will)? Not in a container without
  // ptrace, or under Yama scope 3.
  int ready[2];
  if (pipe(ready) != 0) return 1;
  pid_t sleeper = fork();
  if (sleeper == 0) {
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  char c;
  if (read(ready[0], &c, 1) != 1) return 1;
  close(ready[0]);
  close(ready[1]);
  pid_t prober = fork();
  if (prober == 0) _exit(ptrace(PTRACE_SEIZE, sleeper, nullptr, nullptr) == 0 ? 0 : 1);
  int status = 0;
  waitpid(prober, &status, 0);
  kill(sleeper, SIGKILL);
  waitpid(sleeper, nullptr, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::printf("ptrace is not allowed here (gdb cannot attach): skipped\n");
    return 77;
  }
  unsetenv("DEBUGINFOD_URLS");  // gdb and xtimer_symbolize read local debug info only
  return RUN_ALL_TESTS();
}
