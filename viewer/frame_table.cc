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
  if (!function.empty()) return std::string(function);
  if (!module.empty()) return std::string(Basename(module)) + "+" + std::string(offset.empty() ? "?" : offset);
  if (!offset.empty()) return std::string(offset);
  return "??";
}

std::string FrameInfo::Source() const {
  if (!file.empty()) return line > 0 ? std::string(file) + ":" + std::to_string(line) : std::string(file);
  if (!module.empty()) return std::string(module);
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

FrameTable::FrameTable() : frames_(std::make_unique<Frames>()), index_(0, IdHash{frames_.get()}, IdEq{frames_.get()}) {}

size_t FrameTable::HashOf(const Key& k) {
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

uint32_t FrameTable::Find(const Key& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? kNone : *it;
}

uint32_t FrameTable::Insert(const Key& key, FrameKind kind, std::string_view module_for_info) {
  if (uint32_t id = Find(key); id != kNone) return id;
  // The stored frame's key is the key it was made from: KeyOf drops the same fields again.
  FrameInfo& f = frames_->emplace_back();
  f.origin = key.origin;
  f.kind = kind;
  f.function = strings_.Intern(key.function);
  f.file = strings_.Intern(key.file);
  f.module = strings_.Intern(module_for_info);
  f.offset = strings_.Intern(key.offset);
  f.line = key.line;
  uint32_t id = static_cast<uint32_t>(frames_->size() - 1);
  index_.insert(id);
  return id;
}

uint32_t FrameTable::Intern(const PythonFrame& f) {
  Key k = KeyOf(FrameInfo::Origin::kPython, f.function, f.file, f.line, {}, {});
  if (uint32_t id = Find(k); id != kNone) return id;
  return Insert(k, ClassifyPythonFrame(f.function, f.file), {});
}

uint32_t FrameTable::Intern(const NativeFrame& f) {
  Key k = KeyOf(FrameInfo::Origin::kNative, f.function, f.file, f.line, f.module, f.offset);
  if (uint32_t id = Find(k); id != kNone) return id;
  return Insert(k, ClassifyNativeFrame(f.function, f.module), f.module);
}

// The same identity as KeyOf, compared field by field against the stored frame (whose fields are
// the key's, see Insert; only module is kept beside the key when the file names the frame).
bool FrameTable::Is(uint32_t id, const PythonFrame& f) const {
  if (id >= frames_->size()) return false;
  const FrameInfo& s = (*frames_)[id];
  return s.origin == FrameInfo::Origin::kPython && s.function == f.function && s.file == f.file &&
         (f.file.empty() || s.line == f.line);
}

bool FrameTable::Is(uint32_t id, const NativeFrame& f) const {
  if (id >= frames_->size()) return false;
  const FrameInfo& s = (*frames_)[id];
  if (s.origin != FrameInfo::Origin::kNative || s.function != f.function || s.file != f.file) return false;
  if (!f.function.empty() || s.offset == f.offset) {
    if (!f.file.empty()) return s.line == f.line;
    return s.module == f.module;
  }
  return false;
}

uint32_t FrameTable::InternSynthetic(std::string_view name, std::string_view source) {
  Key k = KeyOf(FrameInfo::Origin::kSynthetic, name, source, 0, {}, {});
  if (uint32_t id = Find(k); id != kNone) return id;
  return Insert(k, FrameKind::kState, {});
}

uint32_t FrameTable::InternCopy(const FrameInfo& f) {
  Key k = KeyOf(f.origin, f.function, f.file, f.line, f.module, f.offset);
  if (uint32_t id = Find(k); id != kNone) return id;
  uint32_t id = Insert(k, f.kind, f.module);
  return id;
}

}  // namespace xtimer
