#include "launcher/preload_env.h"

#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "common/env.h"

namespace xtimer {
namespace {

// <dir of this executable>/../lib/libxtimer_preload.so, unless XTIMER_PRELOAD_LIB says otherwise.
std::string PreloadPath() {
  std::string configured = xtimer::env::String("XTIMER_PRELOAD_LIB");
  if (!configured.empty()) return configured;
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "libxtimer_preload.so";
  exe[n] = '\0';
  std::string dir(exe);
  dir.erase(dir.rfind('/'));
  return dir + "/../lib/libxtimer_preload.so";
}

// Whether the ELF object open on fd says DF_1_PIE in its dynamic section: a program, which
// ld.so refuses to preload although its type is ET_DYN like a library's.
bool IsPositionIndependentExecutable(int fd, const Elf64_Ehdr& h, off_t size) {
  if (h.e_phentsize != sizeof(Elf64_Phdr) || h.e_phnum == 0 || h.e_phnum > 256) return false;
  for (uint16_t i = 0; i < h.e_phnum; ++i) {
    Elf64_Phdr ph{};
    off_t at = static_cast<off_t>(h.e_phoff + uint64_t{i} * sizeof ph);
    if (h.e_phoff >= static_cast<uint64_t>(size) || pread(fd, &ph, sizeof ph, at) != sizeof ph) return false;
    if (ph.p_type != PT_DYNAMIC) continue;
    for (uint64_t k = 0; k < std::min<uint64_t>(ph.p_filesz / sizeof(Elf64_Dyn), 4096); ++k) {
      Elf64_Dyn d{};
      if (pread(fd, &d, sizeof d, static_cast<off_t>(ph.p_offset + k * sizeof d)) != sizeof d || d.d_tag == DT_NULL)
        return false;
      if (d.d_tag == DT_FLAGS_1) return (d.d_un.d_val & DF_1_PIE) != 0;
    }
    return false;
  }
  return false;
}

// "" when `path` is a shared library this machine's loader can preload (an ELF shared object
// of our class, byte order and machine), else what it is instead. ld.so would only warn
// ("cannot be preloaded ... ignored") and run the job untimed.
std::string NotAPreloadableLibrary(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return std::string("unreadable: ") + std::strerror(errno);
  struct stat st;
  Elf64_Ehdr h{};
  bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  ssize_t n = regular ? pread(fd, &h, sizeof h, 0) : 0;
  bool pie = n == static_cast<ssize_t>(sizeof h) && IsPositionIndependentExecutable(fd, h, st.st_size);
  close(fd);
  if (!regular) return "not a regular file";
  if (n < static_cast<ssize_t>(EI_NIDENT) || std::memcmp(h.e_ident, ELFMAG, SELFMAG) != 0) return "not an ELF file";
  if (n < static_cast<ssize_t>(sizeof h) || h.e_ident[EI_CLASS] != ELFCLASS64) return "not a 64-bit ELF object";
  const unsigned char kOurData = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB;
  if (h.e_ident[EI_DATA] != kOurData) return "an ELF object of the other byte order";
  if (h.e_type != ET_DYN) return "an ELF object but not a shared library";
  if (pie) return "a program (a position-independent executable), not a shared library";
#if defined(__x86_64__)
  if (h.e_machine != EM_X86_64) return "a shared library for another machine (not x86-64)";
#elif defined(__aarch64__)
  if (h.e_machine != EM_AARCH64) return "a shared library for another machine (not aarch64)";
#endif
  return "";
}

// XTIMER_PYTHON_HOOKS: the hook module's folder (xtimer-site, beside the library) first on
// PYTHONPATH, so a Python rank times its GC pauses and DataLoader waits (preload/steps/python/).
void AddPythonPath(const std::string& library, std::vector<std::string>* vars) {
  if (!env::Bool("XTIMER_PYTHON_HOOKS")) return;
  std::string site = library.substr(0, library.rfind('/')) + "/xtimer-site";
  if (access((site + "/sitecustomize.py").c_str(), R_OK) != 0) return;  // an install without it
  std::string path = site;
  if (const char* old = std::getenv("PYTHONPATH"); old != nullptr && *old != '\0') {
    std::string current = old;
    if ((":" + current + ":").find(":" + site + ":") != std::string::npos) return;  // nested launcher
    path += ":" + current;
  }
  vars->push_back("PYTHONPATH=" + path);
}

}  // namespace

bool PreloadVariables(std::vector<std::string>* vars, std::string* error) {
  vars->clear();
  char resolved[PATH_MAX];
  std::string lib = PreloadPath();
  if (realpath(lib.c_str(), resolved) == nullptr || access(resolved, R_OK) != 0) {
    *error = "cannot read the preload library " + lib + " (" + std::strerror(errno) +
             "); build it (scripts/test.sh) or set XTIMER_PRELOAD_LIB";
    return false;
  }
  if (std::string what = NotAPreloadableLibrary(resolved); !what.empty()) {
    *error = "the preload library " + lib + " is " + what +
             "; point XTIMER_PRELOAD_LIB at libxtimer_preload.so (or unset it)";
    return false;
  }
  // Prepend, keeping what the user preloads; a nested xtimer_launch does not add it twice. Its
  // sibling libxtimer_cupti_handover.so, when there, comes right after it: a profiler started in
  // the job takes CUPTI through it (preload/base/cupti_handover.h).
  std::string preload = resolved;
  std::string handover = preload.substr(0, preload.rfind('/')) + "/libxtimer_cupti_handover.so";
  if (access(handover.c_str(), R_OK) == 0) preload += ":" + handover;
  if (const char* old = std::getenv("LD_PRELOAD"); old != nullptr && *old != '\0') {
    if (std::strstr(old, resolved) != nullptr) {
      preload = old;
    } else {
      preload += ":";
      preload += old;
    }
  }
  vars->push_back("LD_PRELOAD=" + preload);
  AddPythonPath(resolved, vars);
  return true;
}

bool SetPreloadEnvironment(std::string* error) {
  std::vector<std::string> vars;
  if (!PreloadVariables(&vars, error)) return false;
  for (const std::string& kv : vars) {
    const size_t eq = kv.find('=');
    setenv(kv.substr(0, eq).c_str(), kv.c_str() + eq + 1, 1);
  }
  return true;
}

}  // namespace xtimer
