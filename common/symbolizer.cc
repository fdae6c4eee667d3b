#include "common/symbolizer.h"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "common/regular_file.h"

namespace xtimer {

struct Symbolizer::Module {
  Dwfl* dwfl = nullptr;
  Dwfl_Module* mod = nullptr;
  GElf_Addr bias = 0;  // Dwfl address = ELF virtual address + bias
  std::string build_id;
  std::string error;
  std::unordered_map<uint64_t, std::vector<SymbolFrame>> cache;
  ~Module() {
    if (dwfl != nullptr) dwfl_end(dwfl);
  }
};

namespace {

char* g_debuginfo_path = nullptr;  // dwfl default: .debug next to the file, /usr/lib/debug, build-id

const Dwfl_Callbacks kCallbacks = {
    nullptr,                          // find_elf (offline reporting opens the file itself)
    dwfl_standard_find_debuginfo,     // separate debug info: debuglink, /usr/lib/debug/.build-id
    dwfl_offline_section_address,
    &g_debuginfo_path,
};

const std::vector<SymbolFrame>& Empty() {
  static const std::vector<SymbolFrame> empty;
  return empty;
}

std::string Hex(const unsigned char* bits, int len) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < len; ++i) {
    out += kDigits[bits[i] >> 4];
    out += kDigits[bits[i] & 15];
  }
  return out;
}

// The name of a subprogram or inlined-subroutine DIE: its linkage name demangled (qualified, as
// the ELF symbol reads), else DW_AT_name qualified by the enclosing namespaces and classes of its
// declaration (functions with internal linkage often have no linkage name).
std::string DieName(Dwarf_Die* die) {
  Dwarf_Attribute attr;
  for (unsigned at : {DW_AT_linkage_name, DW_AT_MIPS_linkage_name}) {
    if (dwarf_attr_integrate(die, at, &attr) != nullptr) {
      if (const char* s = dwarf_formstring(&attr)) return Demangle(s);
    }
  }
  const char* name = nullptr;
  if (dwarf_attr_integrate(die, DW_AT_name, &attr) != nullptr) name = dwarf_formstring(&attr);
  if (name == nullptr) return {};
  // The declaration: follow abstract_origin, then specification.
  Dwarf_Die decl = *die;
  for (int hops = 0; hops < 4; ++hops) {
    Dwarf_Die next;
    if (dwarf_attr(&decl, DW_AT_abstract_origin, &attr) != nullptr && dwarf_formref_die(&attr, &next) != nullptr) {
      decl = next;
    } else if (dwarf_attr(&decl, DW_AT_specification, &attr) != nullptr &&
               dwarf_formref_die(&attr, &next) != nullptr) {
      decl = next;
    } else {
      break;
    }
  }
  std::string qualified = name;
  Dwarf_Die* scopes = nullptr;
  int n = dwarf_getscopes_die(&decl, &scopes);
  for (int i = 1; i < n; ++i) {  // scopes[0] is decl itself
    int tag = dwarf_tag(&scopes[i]);
    if (tag == DW_TAG_namespace || tag == DW_TAG_class_type || tag == DW_TAG_structure_type ||
        tag == DW_TAG_union_type) {
      const char* part = dwarf_diename(&scopes[i]);
      qualified = std::string(part != nullptr ? part : "(anonymous namespace)") + "::" + qualified;
    }
  }
  std::free(scopes);
  return qualified;
}

bool IsFunction(Dwarf_Die* die) {
  int tag = dwarf_tag(die);
  return tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine;
}

// Where an inlined subroutine was called from, in its caller (file table of the CU).
void CallSite(Dwarf_Die* inlined, Dwarf_Files* files, size_t nfiles, SymbolFrame* caller) {
  Dwarf_Attribute attr;
  Dwarf_Word file_index = 0, line = 0;
  if (dwarf_attr(inlined, DW_AT_call_file, &attr) != nullptr && dwarf_formudata(&attr, &file_index) == 0 &&
      files != nullptr && file_index < nfiles) {
    if (const char* f = dwarf_filesrc(files, file_index, nullptr, nullptr)) caller->file = f;
  }
  if (dwarf_attr(inlined, DW_AT_call_line, &attr) != nullptr && dwarf_formudata(&attr, &line) == 0)
    caller->line = static_cast<int>(line);
}

}  // namespace

std::string Demangle(std::string_view name) {
  std::string s(name);
  if (s.size() < 2 || s[0] != '_' || s[1] != 'Z') return s;
  int status = 0;
  char* out = abi::__cxa_demangle(s.c_str(), nullptr, nullptr, &status);
  if (status != 0 || out == nullptr) {
    std::free(out);
    return s;
  }
  std::string result(out);
  std::free(out);
  return result;
}

namespace {

// Module paths come from stack files (untrusted): a FIFO or a device named as a module must not
// block or feed elfutils. Checked by the common rule, then opened by elfutils by name (it finds
// separate debug information next to that name); a file swapped in between the two is the
// caller's own doing.
bool IsRegularFile(const std::string& path, std::string* why) {
  uint64_t size = 0;
  int fd = OpenRegularFile(path, FileRule{.what = "module"}, &size, why);
  if (fd < 0) return false;
  close(fd);
  return true;
}

}  // namespace

Symbolizer::Symbolizer(std::string sysroot) : sysroot_(std::move(sysroot)) {}
Symbolizer::~Symbolizer() = default;

Symbolizer::Module* Symbolizer::Open(const std::string& module) {
  auto it = modules_.find(module);
  if (it != modules_.end()) return it->second.get();
  auto m = std::make_unique<Module>();
  std::string path = sysroot_ + module;
  std::string refused;
  if (module.empty() || module[0] != '/') {
    m->error = "not a file path";
  } else if (!IsRegularFile(path, &refused)) {
    m->error = path + " " + refused;
  } else if ((m->dwfl = dwfl_begin(&kCallbacks)) == nullptr) {
    m->error = std::string("dwfl_begin: ") + dwfl_errmsg(-1);
  } else {
    dwfl_report_begin(m->dwfl);
    m->mod = dwfl_report_offline(m->dwfl, module.c_str(), path.c_str(), -1);
    dwfl_report_end(m->dwfl, nullptr, nullptr);
    if (m->mod == nullptr) {
      m->error = std::string("cannot read ") + path + ": " + dwfl_errmsg(-1);
    } else if (dwfl_module_getelf(m->mod, &m->bias) == nullptr) {
      m->error = std::string("not an ELF object: ") + dwfl_errmsg(-1);
      m->mod = nullptr;
    } else {
      const unsigned char* bits = nullptr;
      GElf_Addr vaddr = 0;
      int len = dwfl_module_build_id(m->mod, &bits, &vaddr);
      if (len > 0) m->build_id = Hex(bits, len);
    }
  }
  Module* raw = m.get();
  modules_.emplace(module, std::move(m));
  return raw;
}

std::string Symbolizer::ModuleError(const std::string& module) const {
  auto it = modules_.find(module);
  return it == modules_.end() ? std::string() : it->second->error;
}

const std::vector<SymbolFrame>& Symbolizer::Resolve(const std::string& module, uint64_t offset,
                                                    const std::string& build_id) {
  Module* m = Open(module);
  if (m->mod == nullptr) return Empty();
  if (!build_id.empty() && !m->build_id.empty() && build_id != m->build_id) {
    if (m->error.empty()) m->error = "build-id differs from the one in the stack file (file replaced since)";
    return Empty();
  }
  auto cached = m->cache.find(offset);
  if (cached != m->cache.end()) return cached->second;

  std::vector<SymbolFrame> frames;
  const Dwarf_Addr addr = offset + m->bias;

  // Inline chain from DWARF: scopes innermost first, down to the subprogram.
  Dwarf_Addr dwbias = 0;
  Dwarf_Die* cudie = dwfl_module_addrdie(m->mod, addr, &dwbias);
  std::vector<Dwarf_Die> chain;  // innermost first, functions only
  Dwarf_Files* files = nullptr;
  size_t nfiles = 0;
  if (cudie != nullptr) {
    // dwarf_getscopes finds the innermost scope at the address, but above an inlined subroutine
    // it lists the scopes of the inlined function's abstract definition; the callers are the
    // concrete parents of that innermost DIE, which dwarf_getscopes_die walks.
    Dwarf_Die* scopes = nullptr;
    int n = dwarf_getscopes(cudie, addr - dwbias, &scopes);
    if (n > 0) {
      Dwarf_Die innermost = scopes[0];
      std::free(scopes);
      scopes = nullptr;
      n = dwarf_getscopes_die(&innermost, &scopes);
    }
    for (int i = 0; i < n; ++i) {
      if (!IsFunction(&scopes[i])) continue;
      chain.push_back(scopes[i]);
      if (dwarf_tag(&scopes[i]) == DW_TAG_subprogram) break;
    }
    std::free(scopes);
    if (dwarf_getsrcfiles(cudie, &files, &nfiles) != 0) files = nullptr;
  }

  // The innermost location from the line table.
  SymbolFrame innermost_loc;
  if (Dwfl_Line* line = dwfl_module_getsrc(m->mod, addr)) {
    int lineno = 0;
    if (const char* f = dwfl_lineinfo(line, nullptr, &lineno, nullptr, nullptr, nullptr)) innermost_loc.file = f;
    innermost_loc.line = lineno;
  }

  if (!chain.empty()) {
    // Root first: chain.back() is the subprogram. Each frame's location is the call site of the
    // next (inlined) one; the last frame's is the line table's.
    for (size_t k = chain.size(); k-- > 0;) {
      SymbolFrame f;
      f.function = DieName(&chain[k]);
      f.inlined = dwarf_tag(&chain[k]) == DW_TAG_inlined_subroutine;
      if (k > 0) {
        CallSite(&chain[k - 1], files, nfiles, &f);
      } else {
        f.file = innermost_loc.file;
        f.line = innermost_loc.line;
      }
      frames.push_back(std::move(f));
    }
    // The function holding the code: its ELF symbol where there is one, so that it reads the
    // same as in modules without DWARF (qualified, with parameters).
    GElf_Off off = 0;
    GElf_Sym sym;
    if (const char* name = dwfl_module_addrinfo(m->mod, addr, &off, &sym, nullptr, nullptr, nullptr))
      frames.front().function = Demangle(name);
  } else {
    // No DWARF here: the ELF symbol table, and the line table if any.
    GElf_Off off = 0;
    GElf_Sym sym;
    const char* name = dwfl_module_addrinfo(m->mod, addr, &off, &sym, nullptr, nullptr, nullptr);
    if (name != nullptr || !innermost_loc.file.empty()) {
      SymbolFrame f = innermost_loc;
      if (name != nullptr) f.function = Demangle(name);
      frames.push_back(std::move(f));
    }
  }
  return m->cache.emplace(offset, std::move(frames)).first->second;
}

}  // namespace xtimer
