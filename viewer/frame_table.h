// Every distinct frame seen in a merge, stored once and named by a small integer id. The prefix
// trees and per-rank signatures hold ids, so 4,096 ranks x 64 threads x 48 frames cost a hash
// lookup per frame and no string copies.
//
// Two frames are the same frame when they print the same: Python frames by function, file and
// line; symbolised native frames by function, file and line (by function and module when the file
// is unknown); unsymbolised native frames by module and offset (offsets are file-relative, so they
// agree across ranks).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/stack_file.h"
#include "viewer/frame_kind.h"

namespace xtimer {

struct FrameInfo {
  enum class Origin : uint8_t { kPython, kNative, kSynthetic };
  Origin origin = Origin::kNative;
  FrameKind kind = FrameKind::kCpp;
  std::string function, file, module, offset;
  int64_t line = 0;

  // The label's function part: function, else "<module basename>+<offset>", else "??".
  std::string Name() const;
  // The label's source part: "file:line", else the module path, else "??".
  std::string Source() const;
  // For summaries: "load_batch (train.py:88)" with the file's basename.
  std::string Short() const;
};

class FrameTable {
 public:
  FrameTable() = default;
  FrameTable(const FrameTable&) = delete;
  FrameTable& operator=(const FrameTable&) = delete;
  FrameTable(FrameTable&&) = default;
  FrameTable& operator=(FrameTable&&) = default;

  uint32_t Intern(const PythonFrame& f);
  uint32_t Intern(const NativeFrame& f);
  // A frame the viewer adds (thread state, GIL holder): shown as name@source.
  uint32_t InternSynthetic(std::string_view name, std::string_view source);
  // Adds a copy of a frame of another table; returns its id here.
  uint32_t InternCopy(const FrameInfo& f);

  // Whether id is the frame Intern(f) would return, without hashing: a caller that remembers the
  // id of the frame it met at the same place before (same thread, same depth, previous rank) checks
  // it with one comparison. Ranks of one job mostly repeat each other's stacks.
  bool Is(uint32_t id, const PythonFrame& f) const;
  bool Is(uint32_t id, const NativeFrame& f) const;

  const FrameInfo& operator[](uint32_t id) const { return frames_[id]; }
  size_t size() const { return frames_.size(); }

 private:
  // The identity of a frame; views into strings owned by frames_ (a deque: elements never move).
  struct Key {
    FrameInfo::Origin origin;
    std::string_view function, file, module, offset;
    int64_t line;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  static Key KeyOf(FrameInfo::Origin origin, std::string_view function, std::string_view file, int64_t line,
                   std::string_view module, std::string_view offset);
  uint32_t Insert(const Key& key, FrameKind kind, std::string_view module_for_info);

  std::deque<FrameInfo> frames_;
  std::unordered_map<Key, uint32_t, KeyHash> index_;
};

}  // namespace xtimer
