#include "common/stacks/stack_symbolize.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/stacks/py_qualname.h"
#include "common/regular_file.h"

namespace xtimer {
namespace {

using Json = nlohmann::ordered_json;  // keeps the writer's key order

constexpr int kNewestVersion = 1;
constexpr size_t kMaxFileBytes = size_t{1} << 30;

bool ParseHex(const std::string& s, uint64_t* out) {
  std::string_view v = s;
  if (v.starts_with("0x") || v.starts_with("0X")) v.remove_prefix(2);
  if (v.empty()) return false;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), *out, 16);
  return ec == std::errc() && p == v.data() + v.size();
}

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

const std::string& BuildId(const std::map<std::string, std::string>& build_ids, const std::string& path) {
  static const std::string none;
  auto it = build_ids.find(path);
  return it == build_ids.end() ? none : it->second;
}

// One symbolised frame: `frame` (module, offset and any field we do not know) with what was found.
Json Expand(const Json& frame, const SymbolFrame& sf) {
  Json f = frame;
  if (!sf.function.empty()) f["function"] = sf.function;
  if (!sf.file.empty()) f["file"] = sf.file;
  if (sf.line > 0) f["line"] = sf.line;
  f["inlined"] = sf.inlined;
  return f;
}

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

}  // namespace

bool SymbolizeStackJson(std::string_view text, Symbolizer& symbolizer, std::string* out, SymbolizeSummary* summary,
                        std::string* error) {
  *summary = SymbolizeSummary();
  Json root = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return (*error = "not valid JSON (truncated or corrupt?)"), false;
  if (!root.is_object()) return (*error = "not a JSON object"), false;
  auto format = root.find("format");
  if (format == root.end() || !format->is_string() || *format != "xtimer-stacktrace")
    return (*error = "not an xtimer stack file (\"format\" is not \"xtimer-stacktrace\")"), false;
  auto version = root.find("version");
  if (version == root.end() || !version->is_number_integer()) return (*error = "no integer \"version\" field"), false;
  if (version->get<int64_t>() > kNewestVersion)
    return (*error = "version " + std::to_string(version->get<int64_t>()) +
                     " is newer than this xtimer_symbolize understands (" + std::to_string(kNewestVersion) + ")"),
           false;
  if (version->get<int64_t>() < 1) return (*error = "invalid version"), false;
  auto threads = root.find("threads");
  if (threads == root.end() || !threads->is_array()) return (*error = "no \"threads\" array"), false;
  auto symbolized = root.find("symbolized");
  if (symbolized != root.end() && symbolized->is_boolean() && symbolized->get<bool>()) {
    summary->already = true;
    out->assign(text);
    return true;
  }

  std::map<std::string, std::string> build_ids;
  auto modules = root.find("modules");
  if (modules != root.end() && modules->is_array()) {
    for (const Json& m : *modules) {
      if (!m.is_object()) continue;
      auto p = m.find("path");
      auto b = m.find("build_id");
      if (p != m.end() && p->is_string() && b != m.end() && b->is_string())
        build_ids[p->get<std::string>()] = b->get<std::string>();
    }
  }

  // Python frames: the qualified name (co_qualname, what py-spy shows) from the source, next to
  // the plain one CPython's dumper gave.
  PyQualnames qualnames(symbolizer.sysroot());
  auto qualify = [&](Json& frames) {
    if (!frames.is_array()) return;
    for (Json& f : frames) {
      if (!f.is_object() || f.contains("qualname")) continue;
      auto fn = f.find("function"), file = f.find("file"), line = f.find("line");
      if (fn == f.end() || !fn->is_string() || file == f.end() || !file->is_string() || line == f.end() ||
          !line->is_number_integer())
        continue;
      std::string q = qualnames.Qualify(file->get<std::string>(), fn->get<std::string>(), line->get<int>());
      if (!q.empty() && q != fn->get<std::string>()) f["qualname"] = q;
    }
  };
  for (Json& thread : *threads)
    if (thread.is_object() && thread.contains("python")) qualify(thread["python"]);
  if (auto um = root.find("python_unmatched"); um != root.end() && um->is_array())
    for (Json& t : *um)
      if (t.is_object() && t.contains("python")) qualify(t["python"]);

  for (Json& thread : *threads) {
    if (!thread.is_object()) continue;
    auto native = thread.find("native");
    if (native == thread.end() || !native->is_array()) continue;
    Json expanded = Json::array();
    // The previous (outer) frame, when it resolved: functions it reached by tail calls sit
    // between it and this one.
    bool have_outer = false;
    CodeLocation outer;
    for (Json& frame : *native) {
      ++summary->frames;
      auto module = frame.is_object() ? frame.find("module") : Json::iterator();
      uint64_t offset = 0;
      bool usable = frame.is_object() && !frame.contains("function") && module != frame.end() && module->is_string() &&
                    frame.contains("offset") && frame["offset"].is_string() &&
                    ParseHex(frame["offset"].get<std::string>(), &offset);
      if (!usable) {
        if (frame.is_object() && frame.contains("function")) ++summary->resolved;
        expanded.push_back(std::move(frame));
        have_outer = false;
        continue;
      }
      const std::string path = module->get<std::string>();
      const std::vector<SymbolFrame>& resolved = symbolizer.Resolve(path, offset, BuildId(build_ids, path));
      if (resolved.empty()) {
        std::string why = symbolizer.ModuleError(path);
        if (!why.empty()) summary->module_errors[path] = why;
        expanded.push_back(std::move(frame));
        have_outer = false;
        continue;
      }
      ++summary->resolved;
      const CodeLocation here{path, offset};
      if (have_outer) {
        for (const CodeLocation& hop : symbolizer.TailCalls(outer, here)) {
          const std::vector<SymbolFrame>& via =
              symbolizer.Resolve(hop.module, hop.offset, BuildId(build_ids, hop.module));
          Json base = Json::object();
          base["module"] = hop.module;
          base["offset"] = Hex(hop.offset);
          base["tail_call"] = true;
          if (via.empty()) expanded.push_back(base);
          for (const SymbolFrame& sf : via) expanded.push_back(Expand(base, sf));
        }
      }
      for (const SymbolFrame& sf : resolved) expanded.push_back(Expand(frame, sf));
      have_outer = true;
      outer = here;
    }
    *native = std::move(expanded);
  }
  root["symbolized"] = true;
  *out = root.dump() + "\n";
  return true;
}

bool SymbolizeStackFile(const std::string& path, Symbolizer& symbolizer, SymbolizeSummary* summary,
                        std::string* error) {
  // A FIFO or a device named as a stack file is refused before any read (common/regular_file.h).
  uint64_t size = 0;
  std::string why;
  int fd = OpenRegularFile(path, FileRule{.what = "stack file", .max_bytes = kMaxFileBytes}, &size, &why);
  if (fd < 0) return (*error = path + ": " + why), false;
  struct stat before;
  if (fstat(fd, &before) != 0) {
    close(fd);
    return (*error = Errno("cannot stat", path)), false;
  }
  std::string text;
  text.resize(static_cast<size_t>(size));
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  text.resize(got);

  std::string out;
  if (!SymbolizeStackJson(text, symbolizer, &out, summary, &why)) return (*error = path + ": " + why), false;
  if (summary->already) return true;

  // Whole for readers, not synced (a stack file need not survive a power cut); not written if a
  // newer dump replaced the file while we worked: its own symboliser will handle that one.
  AtomicWrite how;
  how.sync = false;
  how.still_wanted = [&] {
    struct stat now;
    bool same = stat(path.c_str(), &now) == 0 && now.st_ino == before.st_ino && now.st_dev == before.st_dev;
    if (!same) summary->already = true;
    return same;
  };
  return WriteFileAtomically(path, out, error, how);
}

}  // namespace xtimer
