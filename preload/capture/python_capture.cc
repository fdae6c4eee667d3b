#include "preload/capture/python_capture.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "common/log.h"
#include "preload/capture/elf_symtab.h"
#include "preload/capture/fault_guard.h"

// Why PyGILState_Check() may run inside the capture handler (3.10 - 3.13):
//  - 3.10/3.11: it reads _PyRuntime.gilstate.check_enabled, the TSS key's "created" flag, the
//    atomic tstate_current (the thread state holding the GIL) and pthread_getspecific(key): plain
//    loads, no lock, no allocation.
//  - 3.12/3.13: it reads check_enabled, the thread-local _Py_tss_tstate (non-null only while the
//    thread is attached, i.e. holds the GIL) and pthread_getspecific(key). The thread-local may
//    go through __tls_get_addr, which can allocate the first time a thread touches a library's
//    TLS if that library was dlopen'ed; CheckGilSafetyOnThisThread() therefore enables the check
//    only when libpython's TLS is static (the program itself, or a library loaded at start-up).
// It returns 1 for every thread when the check is disabled (sub-interpreters) or the runtime is
// not set up; the dumper treats "more than one holder" as unknown.

namespace xtimer::capture {
namespace {

struct Libpython {
  std::string path;
  bool tls_static = true;  // no PT_TLS, or its block exists in the calling thread
};

// Objects named libpython3*.so* (for a runtime loaded RTLD_LOCAL, invisible to RTLD_DEFAULT).
std::vector<Libpython> FindLibpython() {
  std::vector<Libpython> found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        const char* name = info->dlpi_name;
        if (name != nullptr && std::strstr(name, "libpython3") != nullptr) {
          Libpython lp;
          lp.path = name;
          lp.tls_static = info->dlpi_tls_modid == 0 || info->dlpi_tls_data != nullptr;
          static_cast<std::vector<Libpython>*>(data)->push_back(lp);
        }
        return 0;
      },
      &found);
  return found;
}

void* FindSymbol(const char* name, const std::vector<void*>& handles) {
  if (void* p = dlsym(RTLD_DEFAULT, name)) return p;
  for (void* h : handles)
    if (void* p = dlsym(h, name)) return p;
  return nullptr;
}

std::string ObjectPath(const char* name) {
  if (name != nullptr && name[0] != '\0') return name;
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return {};
  buf[n] = '\0';
  return buf;
}

bool ParseUint(std::string_view s, int base, uint64_t* out) {
  if (s.empty()) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (base == 16 && c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else if (base == 16 && c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      return false;
    }
    v = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

}  // namespace

std::vector<PyThreadStack> ParseFaulthandlerText(std::string_view text, bool* more_threads) {
  std::vector<PyThreadStack> out;
  if (more_threads != nullptr) *more_threads = false;
  PyThreadStack* cur = nullptr;
  auto finish = [&] {
    if (cur != nullptr) {
      std::vector<PythonFrame>& f = cur->frames;
      std::reverse(f.begin(), f.end());  // faulthandler prints the most recent call first
    }
  };
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.starts_with("Thread 0x") || line.starts_with("Current thread 0x")) {
      finish();
      std::string_view rest = line.substr(line.find("0x") + 2);
      size_t end = 0;
      while (end < rest.size() && std::isxdigit(static_cast<unsigned char>(rest[end]))) ++end;
      out.emplace_back();
      cur = &out.back();
      ParseUint(rest.substr(0, end), 16, &cur->thread_id);
      continue;
    }
    if (line == "...") {  // more threads than CPython lists
      if (more_threads != nullptr) *more_threads = true;
      continue;
    }
    if (cur == nullptr) continue;
    if (line == "  ...") {
      cur->truncated = true;
      continue;
    }
    constexpr std::string_view kFile = "  File \"";
    if (!line.starts_with(kFile)) continue;  // "  <no Python frame>", "  Garbage-collecting", ...
    std::string_view body = line.substr(kFile.size());
    // File names are printed raw (no quote escaping), so split at the last "\", line ".
    size_t sep = body.rfind("\", line ");
    if (sep == std::string_view::npos) continue;
    PythonFrame frame;
    frame.file = std::string(body.substr(0, sep));
    std::string_view after = body.substr(sep + 8);
    size_t in = after.find(" in ");
    if (in == std::string_view::npos) continue;
    uint64_t lineno = 0;
    frame.line = ParseUint(after.substr(0, in), 10, &lineno) && lineno < INT_MAX ? static_cast<int>(lineno) : -1;
    frame.function = std::string(after.substr(in + 4));
    cur->frames.push_back(std::move(frame));
  }
  finish();
  return out;
}

bool PythonCapture::Init() {
  searched_libpython_ = true;
  std::vector<void*> handles;
  std::vector<Libpython> libs = FindLibpython();
  for (const Libpython& lp : libs) {
    // RTLD_NOLOAD: only a handle on what is already there; never loads anything.
    if (void* h = dlopen(lp.path.c_str(), RTLD_LAZY | RTLD_NOLOAD)) handles.push_back(h);
  }
  is_initialized_ = reinterpret_cast<int (*)()>(FindSymbol("Py_IsInitialized", handles));
  gil_check_ = reinterpret_cast<int (*)()>(FindSymbol("PyGILState_Check", handles));
  if (is_initialized_ == nullptr || gil_check_ == nullptr) {
    status_ = "no Python in this process";
    return false;
  }
  Dl_info info;
  link_map* lm = nullptr;
  if (dladdr1(reinterpret_cast<void*>(gil_check_), &info, reinterpret_cast<void**>(&lm), RTLD_DL_LINKMAP) != 0 &&
      lm != nullptr) {
    module_ = ObjectPath(lm->l_name);
  }
  // Version: Py_Version (3.11+) or the Py_GetVersion() string.
  int major = 0, minor = 0, micro = 0;
  if (auto* hex = static_cast<const unsigned long*>(FindSymbol("Py_Version", handles))) {
    major = static_cast<int>((*hex >> 24) & 0xff);
    minor = static_cast<int>((*hex >> 16) & 0xff);
    micro = static_cast<int>((*hex >> 8) & 0xff);
  } else if (auto get = reinterpret_cast<const char* (*)()>(FindSymbol("Py_GetVersion", handles))) {
    std::sscanf(get(), "%d.%d.%d", &major, &minor, &micro);
  }
  std::string version = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(micro);
  if (major != 3 || minor < 7) {
    status_ = "unsupported Python " + version;
    gil_check_ = nullptr;
    return false;
  }
  if (minor > 13)
    Log(LogLevel::kInfo, "Python %s is newer than the versions tested for stack capture", version.c_str());
  is_finalizing_ = reinterpret_cast<int (*)()>(FindSymbol("Py_IsFinalizing", handles));
  if (is_finalizing_ == nullptr) is_finalizing_ = reinterpret_cast<int (*)()>(FindSymbol("_Py_IsFinalizing", handles));

  dump_ = reinterpret_cast<DumpFn>(FindSymbol("_Py_DumpTracebackThreads", handles));
  if (dump_ == nullptr && lm != nullptr && !module_.empty()) {
    // Hidden in this build: take it from the static symbol table, after checking that the file
    // on disk is the object in memory (PyGILState_Check must land where dlsym found it).
    const char* names[] = {"_Py_DumpTracebackThreads", "PyGILState_Check"};
    uint64_t values[2] = {0, 0};
    std::string error;
    if (LookupElfSymbols(module_, names, values, &error) && values[0] != 0 &&
        lm->l_addr + values[1] == reinterpret_cast<uintptr_t>(gil_check_)) {
      dump_ = reinterpret_cast<DumpFn>(lm->l_addr + values[0]);
    }
  }
  if (dump_ == nullptr) {
    status_ = "Python " + version + ": _Py_DumpTracebackThreads not found in " + module_ +
              " (stripped build); no Python frames";
    return false;
  }
  if (!names_.Init(minor, [&](const char* name) { return FindSymbol(name, handles); }))
    Log(LogLevel::kInfo, "Python thread names not read: %s", names_.status().c_str());
  memfd_ = memfd_create("xtimer-pystack", MFD_CLOEXEC);
  if (memfd_ < 0) {
    status_ = std::string("Python ") + version + ": memfd_create failed: " + std::strerror(errno);
    dump_ = nullptr;
    return false;
  }
  status_ = version;
  return true;
}

void PythonCapture::CheckGilSafetyOnThisThread() {
  gil_safe_ = false;
  if (gil_check_ == nullptr) return;
  // A dlopen'ed libpython whose TLS block this (fresh) thread does not have yet: touching its
  // thread-locals in a handler could allocate. The program itself or a start-up library: fine.
  for (const Libpython& lp : FindLibpython()) {
    if (lp.path == module_ && !lp.tls_static) {
      Log(LogLevel::kInfo, "%s was loaded at run time: holds_gil is left unknown in stack files", module_.c_str());
      return;
    }
  }
  gil_safe_ = true;
}

bool PythonCapture::LibpythonAppeared() const { return dump_ == nullptr && !FindLibpython().empty(); }

void PythonCapture::ResetAfterFork() {
  if (memfd_ >= 0) close(memfd_);  // shared with the parent: it must not write into ours
  memfd_ = dump_ != nullptr ? memfd_create("xtimer-pystack", MFD_CLOEXEC) : -1;
  if (memfd_ < 0) dump_ = nullptr;
}

bool PythonCapture::Dump(std::vector<PyThreadStack>* out, std::string* error) {
  out->clear();
  names_status_.clear();
  if (dump_ == nullptr) return (*error = status_), false;
  if (is_initialized_() == 0) return (*error = "Python is not initialised"), false;
  if (is_finalizing_ != nullptr && is_finalizing_() != 0) return (*error = "Python is shutting down"), false;
  if (ftruncate(memfd_, 0) != 0 || lseek(memfd_, 0, SEEK_SET) != 0) {
    return (*error = std::string("memfd: ") + std::strerror(errno)), false;
  }
  // The dumper reads live interpreter structures other threads may be changing (faulthandler's
  // watchdog does the same); a torn read is rare, but a crash would kill the job.
  FaultGuard guard;  // one at a time in the process: the dumper and the sampler wait for each other
  const char* result = nullptr;
  const bool ok = guard.installed() ? guard.Run([&] { result = dump_(memfd_, nullptr, nullptr); })
                                    : (result = dump_(memfd_, nullptr, nullptr), true);
  if (!ok) return (*error = "the interpreter changed under the Python dumper (fault caught); no Python frames"), false;
  if (result != nullptr) return (*error = std::string("CPython: ") + result), false;
  off_t size = lseek(memfd_, 0, SEEK_CUR);
  std::string text;
  if (size > 0) {
    text.resize(static_cast<size_t>(size));
    ssize_t n = pread(memfd_, text.data(), text.size(), 0);
    text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  }
  bool more = false;
  *out = ParseFaulthandlerText(text, &more);
  if (more) *error = "CPython lists at most 100 threads; the rest have no Python frames";
  std::unordered_map<uint64_t, std::string> names;
  if (names_.Read(&guard, &names, &names_status_)) {
    names_status_ = "ok";
    for (PyThreadStack& t : *out) {
      auto it = names.find(t.thread_id);
      if (it != names.end()) t.name = std::move(it->second);
    }
  }
  return true;
}

}  // namespace xtimer::capture
