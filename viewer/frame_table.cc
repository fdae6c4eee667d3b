#include "viewer/frame_table.h"

#include <functional>

namespace xtimer {
namespace {

std::string_view Basename(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::string FrameInfo::Name() const {
  if (!function.empty()) return function;
  if (!module.empty()) return std::string(Basename(module)) + "+" + (offset.empty() ? "?" : offset);
  if (!offset.empty()) return offset;
  return "??";
}

std::string FrameInfo::Source() const {
  if (!file.empty()) return line > 0 ? file + ":" + std::to_string(line) : file;
  if (!module.empty()) return module;
  return "??";
}

std::string FrameInfo::Short() const {
  std::string name = Name();
  if (origin == Origin::kSynthetic) return name;
  if (!file.empty())
    return name + " (" + std::string(Basename(file)) + (line > 0 ? ":" + std::to_string(line) : "") + ")";
  if (!function.empty() && !module.empty()) return name + " (" + std::string(Basename(module)) + ")";
  return name;
}

size_t FrameTable::KeyHash::operator()(const Key& k) const {
  std::hash<std::string_view> h;
  size_t v = h(k.function);
  v = v * 31 + h(k.file);
  v = v * 31 + h(k.module);
  v = v * 31 + h(k.offset);
  v = v * 31 + static_cast<size_t>(k.line);
  return v * 4 + static_cast<size_t>(k.origin);
}

FrameTable::Key FrameTable::KeyOf(FrameInfo::Origin origin, std::string_view function, std::string_view file,
                                  int64_t line, std::string_view module, std::string_view offset) {
  Key k{origin, function, file, module, offset, line};
  if (origin == FrameInfo::Origin::kNative) {
    if (!function.empty()) k.offset = {};  // symbolised: the offset varies by call site only
    if (!file.empty()) k.module = {};      // the source location names it
  }
  if (file.empty()) k.line = 0;
  return k;
}

uint32_t FrameTable::Insert(const Key& key, FrameKind kind, std::string_view module_for_info) {
  auto it = index_.find(key);
  if (it != index_.end()) return it->second;
  FrameInfo& f = frames_.emplace_back();
  f.origin = key.origin;
  f.kind = kind;
  f.function = key.function;
  f.file = key.file;
  f.module = module_for_info;
  f.offset = key.offset;
  f.line = key.line;
  uint32_t id = static_cast<uint32_t>(frames_.size() - 1);
  // The stored key views the stored strings, not the caller's.
  index_.emplace(KeyOf(f.origin, f.function, f.file, f.line,
                       key.module.empty() ? std::string_view() : std::string_view(f.module), f.offset),
                 id);
  return id;
}

uint32_t FrameTable::Intern(const PythonFrame& f) {
  Key k = KeyOf(FrameInfo::Origin::kPython, f.function, f.file, f.line, {}, {});
  auto it = index_.find(k);
  if (it != index_.end()) return it->second;
  return Insert(k, ClassifyPythonFrame(f.function, f.file), {});
}

uint32_t FrameTable::Intern(const NativeFrame& f) {
  Key k = KeyOf(FrameInfo::Origin::kNative, f.function, f.file, f.line, f.module, f.offset);
  auto it = index_.find(k);
  if (it != index_.end()) return it->second;
  return Insert(k, ClassifyNativeFrame(f.function, f.module), f.module);
}

// The same identity as KeyOf, compared field by field against the stored frame (whose fields are
// the key's, see Insert; only module is kept beside the key when the file names the frame).
bool FrameTable::Is(uint32_t id, const PythonFrame& f) const {
  if (id >= frames_.size()) return false;
  const FrameInfo& s = frames_[id];
  return s.origin == FrameInfo::Origin::kPython && s.function == f.function && s.file == f.file &&
         (f.file.empty() || s.line == f.line);
}

bool FrameTable::Is(uint32_t id, const NativeFrame& f) const {
  if (id >= frames_.size()) return false;
  const FrameInfo& s = frames_[id];
  if (s.origin != FrameInfo::Origin::kNative || s.function != f.function || s.file != f.file) return false;
  if (!f.function.empty() || s.offset == f.offset) {
    if (!f.file.empty()) return s.line == f.line;
    return s.module == f.module;
  }
  return false;
}

uint32_t FrameTable::InternSynthetic(std::string_view name, std::string_view source) {
  Key k = KeyOf(FrameInfo::Origin::kSynthetic, name, source, 0, {}, {});
  auto it = index_.find(k);
  if (it != index_.end()) return it->second;
  return Insert(k, FrameKind::kState, {});
}

uint32_t FrameTable::InternCopy(const FrameInfo& f) {
  Key k = KeyOf(f.origin, f.function, f.file, f.line, f.module, f.offset);
  auto it = index_.find(k);
  if (it != index_.end()) return it->second;
  uint32_t id = Insert(k, f.kind, f.module);
  return id;
}

}  // namespace xtimer
