#include "common/stacks/symbolizer.h"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/regular_file.h"

namespace xtimer {

struct Symbolizer::Module {
  // A call site that ends its function with a jump: where it jumps from, what it calls.
  struct TailSite {
    Dwarf_Addr return_pc;  // Dwfl address just after the jump
    Dwarf_Die origin;      // the function called
  };
  std::string path;  // as stack files name it
  Dwfl* dwfl = nullptr;
  Dwfl_Module* mod = nullptr;
  GElf_Addr bias = 0;  // Dwfl address = ELF virtual address + bias
  std::string build_id;
  std::string error;
  std::unordered_map<uint64_t, std::vector<SymbolFrame>> cache;
  // For tail calls, filled on first use: function entry (Dwfl address) by ELF symbol name (0 when
  // the name is ambiguous), and the tail call sites of each function by its entry.
  bool names_loaded = false;
  std::unordered_map<std::string, Dwarf_Addr> entry_by_name;
  std::unordered_map<Dwarf_Addr, std::vector<TailSite>> tail_sites;
  ~Module() {
    if (dwfl != nullptr) dwfl_end(dwfl);
  }
};

namespace {

char* g_debuginfo_path = nullptr;  // dwfl default: .debug next to the file, /usr/lib/debug, build-id

const Dwfl_Callbacks kCallbacks = {
    nullptr,                       // find_elf (offline reporting opens the file itself)
    dwfl_standard_find_debuginfo,  // separate debug info: debuglink, /usr/lib/debug/.build-id
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
    } else if (dwarf_attr(&decl, DW_AT_specification, &attr) != nullptr && dwarf_formref_die(&attr, &next) != nullptr) {
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

// An ELF symbol's name without its symbol version ("pthread_cond_wait@@GLIBC_2.3.2" in a
// .symtab from separate debug info): the same function reads the same with and without it.
std::string WithoutVersion(const char* name) {
  const char* at = std::strchr(name, '@');
  return at != nullptr && at != name ? std::string(name, at) : std::string(name);
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

Symbolizer::Symbolizer(std::string sysroot) : sysroot_(std::move(sysroot)) {}
Symbolizer::~Symbolizer() = default;

Symbolizer::Module* Symbolizer::Open(const std::string& module) {
  auto it = modules_.find(module);
  if (it != modules_.end()) return it->second.get();
  auto m = std::make_unique<Module>();
  m->path = module;
  std::string path = sysroot_ + module;
  std::string refused;
  // Module paths come from stack files (untrusted): a FIFO or a device named as a module must not
  // block or feed elfutils. The file is opened by the common rule and elfutils reads that very
  // descriptor (it still uses the name to find separate debug information next to it), so
  // nothing can be swapped in between the check and the read.
  int fd = -1;
  uint64_t size = 0;
  if (module.empty() || module[0] != '/') {
    m->error = "not a file path";
  } else if ((fd = OpenRegularFile(path, FileRule{.what = "module"}, &size, &refused)) < 0) {
    m->error = path + " " + refused;
  } else if ((m->dwfl = dwfl_begin(&kCallbacks)) == nullptr) {
    close(fd);
    m->error = std::string("dwfl_begin: ") + dwfl_errmsg(-1);
  } else {
    dwfl_report_begin(m->dwfl);
    m->mod = dwfl_report_offline(m->dwfl, module.c_str(), path.c_str(), fd);  // consumes fd on success
    dwfl_report_end(m->dwfl, nullptr, nullptr);
    if (m->mod == nullptr) close(fd);
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
      frames.front().function = Demangle(WithoutVersion(name));
  } else {
    // No DWARF here: the ELF symbol table, and the line table if any.
    GElf_Off off = 0;
    GElf_Sym sym;
    const char* name = dwfl_module_addrinfo(m->mod, addr, &off, &sym, nullptr, nullptr, nullptr);
    if (name != nullptr || !innermost_loc.file.empty()) {
      SymbolFrame f = innermost_loc;
      if (name != nullptr) f.function = Demangle(WithoutVersion(name));
      frames.push_back(std::move(f));
    }
  }
  return m->cache.emplace(offset, std::move(frames)).first->second;
}

// ---- Tail calls (Symbolizer::TailCalls), the way gdb's DWARF reader finds its "tailcall" frames.

namespace {

bool IsCallSite(Dwarf_Die* die) {
  int tag = dwarf_tag(die);
  return tag == DW_TAG_call_site || tag == DW_TAG_GNU_call_site;
}

// The return address of a call site (a DWARF address): DWARF 5's DW_AT_call_return_pc, or the
// low_pc of a DW_TAG_GNU_call_site (DWARF 4 with GNU extensions).
bool CallSiteReturnPc(Dwarf_Die* site, Dwarf_Addr* pc) {
  Dwarf_Attribute attr;
  if (dwarf_attr(site, DW_AT_call_return_pc, &attr) != nullptr) return dwarf_formaddr(&attr, pc) == 0;
  if (dwarf_attr(site, DW_AT_low_pc, &attr) != nullptr) return dwarf_formaddr(&attr, pc) == 0;
  return false;
}

bool CallSiteIsTail(Dwarf_Die* site) {
  Dwarf_Attribute attr;
  bool flag = false;
  for (unsigned at : {DW_AT_call_tail_call, DW_AT_GNU_tail_call}) {
    if (dwarf_attr(site, at, &attr) != nullptr && dwarf_formflag(&attr, &flag) == 0 && flag) return true;
  }
  return false;
}

// The function a direct call site calls (an indirect call has DW_AT_call_target instead).
bool CallSiteOrigin(Dwarf_Die* site, Dwarf_Die* out) {
  Dwarf_Attribute attr;
  for (unsigned at : {DW_AT_call_origin, DW_AT_abstract_origin}) {
    if (dwarf_attr(site, at, &attr) != nullptr && dwarf_formref_die(&attr, out) != nullptr) return true;
  }
  return false;
}

// Where a function DIE's code starts (DWARF address): entry_pc / low_pc, else its first range.
bool DieEntry(Dwarf_Die* die, Dwarf_Addr* entry) {
  if (dwarf_entrypc(die, entry) == 0) return true;
  Dwarf_Addr base = 0, start = 0, end = 0;
  return dwarf_ranges(die, 0, &base, &start, &end) > 0 && ((*entry = start), true);
}

// The concrete subprogram DIE holding `addr` (a Dwfl address), and the CU's address bias.
bool SubprogramAt(Dwfl_Module* mod, Dwarf_Addr addr, Dwarf_Die* out, Dwarf_Addr* dwbias) {
  Dwarf_Die* cudie = dwfl_module_addrdie(mod, addr, dwbias);
  if (cudie == nullptr) return false;
  Dwarf_Die* scopes = nullptr;
  int n = dwarf_getscopes(cudie, addr - *dwbias, &scopes);
  if (n <= 0) return false;
  Dwarf_Die innermost = scopes[0];
  std::free(scopes);
  scopes = nullptr;
  n = dwarf_getscopes_die(&innermost, &scopes);
  bool found = false;
  for (int i = 0; i < n && !found; ++i) {
    if (dwarf_tag(&scopes[i]) == DW_TAG_subprogram) {
      *out = scopes[i];
      found = true;
    }
  }
  std::free(scopes);
  return found;
}

// The scopes holding `addr` (a Dwfl address), innermost first, up to and including the concrete
// subprogram: where a call site at that address can be found.
std::vector<Dwarf_Die> ScopesAt(Dwfl_Module* mod, Dwarf_Addr addr, Dwarf_Addr* dwbias) {
  std::vector<Dwarf_Die> out;
  Dwarf_Die* cudie = dwfl_module_addrdie(mod, addr, dwbias);
  if (cudie == nullptr) return out;
  Dwarf_Die* scopes = nullptr;
  int n = dwarf_getscopes(cudie, addr - *dwbias, &scopes);
  if (n <= 0) return out;
  Dwarf_Die innermost = scopes[0];
  std::free(scopes);
  scopes = nullptr;
  n = dwarf_getscopes_die(&innermost, &scopes);
  for (int i = 0; i < n; ++i) {
    out.push_back(scopes[i]);
    if (dwarf_tag(&scopes[i]) == DW_TAG_subprogram) break;
  }
  std::free(scopes);
  return out;
}

// Every call site under `die` (its lexical blocks and inlined code included).
template <typename Fn>
void ForEachCallSite(Dwarf_Die* die, const Fn& fn, int depth = 0) {
  Dwarf_Die child;
  if (depth > 64 || dwarf_child(die, &child) != 0) return;
  do {
    if (IsCallSite(&child)) {
      fn(&child);
    } else if (dwarf_haschildren(&child)) {
      int tag = dwarf_tag(&child);
      if (tag == DW_TAG_lexical_block || tag == DW_TAG_inlined_subroutine) ForEachCallSite(&child, fn, depth + 1);
    }
  } while (dwarf_siblingof(&child, &child) == 0);
}

std::string DieLinkageOrName(Dwarf_Die* die) {
  Dwarf_Attribute attr;
  for (unsigned at : {DW_AT_linkage_name, DW_AT_MIPS_linkage_name, DW_AT_name}) {
    if (dwarf_attr_integrate(die, at, &attr) != nullptr) {
      if (const char* s = dwarf_formstring(&attr)) return s;
    }
  }
  return {};
}

}  // namespace

class TailCallFinder {
 public:
  using Module = Symbolizer::Module;
  struct Function {
    Module* m = nullptr;
    Dwarf_Addr entry = 0;  // Dwfl address
    bool operator==(const Function&) const = default;
  };
  struct Hop {
    Module* m;
    Dwarf_Addr return_pc;  // just after the jump, Dwfl address
    bool operator==(const Hop&) const = default;
  };

  static constexpr int kMaxDepth = 12;         // tail calls in a row
  static constexpr size_t kMaxPaths = 32;      // distinct paths found
  static constexpr int kMaxExpansions = 4096;  // functions whose tail calls are followed, per search

  // The function holding `addr` (Dwfl address) in `m`: its DWARF subprogram, else its ELF symbol.
  static bool FunctionAt(Module* m, Dwarf_Addr addr, Function* out) {
    Dwarf_Die sub;
    Dwarf_Addr dwbias = 0, entry = 0;
    if (SubprogramAt(m->mod, addr, &sub, &dwbias) && DieEntry(&sub, &entry)) {
      *out = {m, entry + dwbias};
      return true;
    }
    GElf_Off off = 0;
    GElf_Sym sym;
    if (dwfl_module_addrinfo(m->mod, addr, &off, &sym, nullptr, nullptr, nullptr) == nullptr) return false;
    *out = {m, addr - off};
    return true;
  }

  // The function a call site in `m` calls: a definition in `m` by its address, a declaration by
  // its name, looked up in `callee` (the module the stack continues in), then in `m`.
  static bool Target(Module* m, Dwarf_Die* origin, Module* callee, Function* out) {
    Dwarf_Attribute attr;
    bool declaration = false;
    if (dwarf_attr(origin, DW_AT_declaration, &attr) != nullptr) dwarf_formflag(&attr, &declaration);
    Dwarf_Addr entry = 0, dwbias = 0;
    if (!declaration && DieEntry(origin, &entry) && dwfl_module_getdwarf(m->mod, &dwbias) != nullptr) {
      *out = {m, entry + dwbias};
      return true;
    }
    std::string name = DieLinkageOrName(origin);
    if (name.empty()) return false;
    for (Module* look : {callee, m}) {
      Dwarf_Addr at = EntryByName(look, name);
      if (at != 0) {
        *out = {look, at};
        return true;
      }
    }
    return false;
  }

  static Dwarf_Addr EntryByName(Module* m, const std::string& name) {
    if (!m->names_loaded) {
      m->names_loaded = true;
      int n = dwfl_module_getsymtab(m->mod);
      for (int i = 1; i < n; ++i) {
        GElf_Sym sym;
        GElf_Addr addr = 0;
        GElf_Word shndx = 0;
        const char* s = dwfl_module_getsym_info(m->mod, i, &sym, &addr, &shndx, nullptr, nullptr);
        int type = GELF_ST_TYPE(sym.st_info);
        if (s == nullptr || *s == '\0' || sym.st_shndx == SHN_UNDEF || addr == 0 ||
            (type != STT_FUNC && type != STT_GNU_IFUNC))
          continue;
        std::string full = WithoutVersion(s);
        // "f.constprop.0", "f.isra.0", "f.part.0": a copy of f the compiler specialised.
        std::string base = full.substr(0, full.find('.'));
        for (const std::string& key : {full, base}) {
          auto [it, added] = m->entry_by_name.emplace(key, addr);
          if (!added && it->second != addr && key == full) it->second = 0;  // two functions: ambiguous
        }
      }
    }
    auto it = m->entry_by_name.find(name);
    return it == m->entry_by_name.end() ? 0 : it->second;
  }

  static const std::vector<Module::TailSite>& TailSites(const Function& f) {
    auto it = f.m->tail_sites.find(f.entry);
    if (it != f.m->tail_sites.end()) return it->second;
    std::vector<Module::TailSite> sites;
    Dwarf_Die sub;
    Dwarf_Addr dwbias = 0, entry = 0;
    if (SubprogramAt(f.m->mod, f.entry, &sub, &dwbias) && DieEntry(&sub, &entry) && entry + dwbias == f.entry) {
      ForEachCallSite(&sub, [&](Dwarf_Die* site) {
        Dwarf_Addr pc = 0;
        Module::TailSite t;
        if (CallSiteIsTail(site) && CallSiteReturnPc(site, &pc) && CallSiteOrigin(site, &t.origin)) {
          t.return_pc = pc + dwbias;
          sites.push_back(t);
        }
      });
    }
    return f.m->tail_sites.emplace(f.entry, std::move(sites)).first->second;
  }

  struct SearchState {
    std::vector<Function> on_path;
    std::vector<Hop> hops;
    std::vector<std::vector<Hop>> paths;
    int budget = kMaxExpansions;
    bool gave_up = false;  // too many paths or functions: the paths found may not be all
  };

  // Every path of tail calls from `from` to `to` (depth-first, no function twice on a path).
  static void Search(const Function& from, const Function& to, SearchState* st) {
    if (from == to) {
      st->paths.push_back(st->hops);
      if (st->paths.size() > kMaxPaths) st->gave_up = true;
      return;
    }
    if (st->gave_up || static_cast<int>(st->hops.size()) >= kMaxDepth) return;
    if (--st->budget < 0) {
      st->gave_up = true;
      return;
    }
    st->on_path.push_back(from);
    for (const Module::TailSite& site : TailSites(from)) {
      Function next;
      Dwarf_Die origin = site.origin;
      if (!Target(from.m, &origin, to.m, &next)) continue;
      if (std::find(st->on_path.begin(), st->on_path.end(), next) != st->on_path.end()) continue;
      st->hops.push_back({from.m, site.return_pc});
      Search(next, to, st);
      st->hops.pop_back();
      if (st->gave_up) break;
    }
    st->on_path.pop_back();
  }

  static std::vector<CodeLocation> Find(Module* caller, uint64_t caller_offset, Module* callee,
                                        uint64_t callee_offset) {
    std::vector<CodeLocation> out;
    // The call site whose return address is the caller's (its offset is that minus one).
    const Dwarf_Addr in_call = caller_offset + caller->bias;
    Dwarf_Addr dwbias = 0;
    Dwarf_Die origin;
    bool found = false;
    for (Dwarf_Die& scope : ScopesAt(caller->mod, in_call, &dwbias)) {
      ForEachCallSite(&scope, [&](Dwarf_Die* site) {
        Dwarf_Addr pc = 0;
        if (!found && CallSiteReturnPc(site, &pc) && pc + dwbias == in_call + 1 && CallSiteOrigin(site, &origin))
          found = true;
      });
      if (found) break;
    }
    Function called, goal;
    if (!found || !Target(caller, &origin, callee, &called) ||
        !FunctionAt(callee, callee_offset + callee->bias, &goal) || called == goal)
      return out;
    SearchState st;
    Search(called, goal, &st);
    if (st.paths.empty() || st.gave_up) return out;
    const std::vector<std::vector<Hop>>& paths = st.paths;
    // Several paths: keep what they all agree on, from each end (as gdb does).
    size_t shortest = paths[0].size();
    for (const auto& p : paths) shortest = std::min(shortest, p.size());
    size_t prefix = 0, suffix = 0;
    auto same_at = [&](auto index) {
      for (const auto& p : paths)
        if (!(p[index(p)] == paths[0][index(paths[0])])) return false;
      return true;
    };
    while (prefix < shortest && same_at([&](const std::vector<Hop>&) { return prefix; })) ++prefix;
    while (suffix < shortest - prefix && same_at([&](const std::vector<Hop>& p) { return p.size() - 1 - suffix; }))
      ++suffix;
    std::vector<Hop> kept(paths[0].begin(), paths[0].begin() + static_cast<std::ptrdiff_t>(prefix));
    kept.insert(kept.end(), paths[0].end() - static_cast<std::ptrdiff_t>(suffix), paths[0].end());
    for (const Hop& h : kept) out.push_back({h.m->path, h.return_pc - h.m->bias - 1});
    return out;
  }
};

const std::vector<CodeLocation>& Symbolizer::TailCalls(const CodeLocation& caller, const CodeLocation& callee) {
  auto key = std::make_pair(caller, callee);
  auto cached = tail_calls_.find(key);
  if (cached != tail_calls_.end()) return cached->second;
  std::vector<CodeLocation> found;
  Module* mc = Open(caller.module);
  Module* me = Open(callee.module);
  if (mc->mod != nullptr && me->mod != nullptr) found = TailCallFinder::Find(mc, caller.offset, me, callee.offset);
  return tail_calls_.emplace(std::move(key), std::move(found)).first->second;
}

}  // namespace xtimer
