// Every distinct frame seen in a merge, stored once and named by a small integer id. The prefix
// trees and per-rank signatures hold ids, so 4,096 ranks x 64 threads x 48 frames cost a hash
// lookup per frame and no string copies. A frame's strings are views into the table's StringPool
// (each distinct string once) and the index holds ids only: about 100 bytes per distinct frame.
//
// Two frames are the same frame when they print the same: Python frames by function, file and
// line; symbolised native frames by function, file and line (by function and module when the file
// is unknown); unsymbolised native frames by module and offset (offsets are file-relative, so they
// agree across ranks).
#pragma once

#include <absl/container/flat_hash_set.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>

#include "common/stacks/stack_file.h"
#include "viewer/frame_kind.h"
#include "viewer/string_pool.h"

namespace xtimer {

struct FrameInfo {
  enum class Origin : uint8_t { kPython, kNative, kSynthetic };
  Origin origin = Origin::kNative;
  FrameKind kind = FrameKind::kCpp;
  // In a FrameTable: views into its pool, valid as long as the table. A FrameInfo made by hand
  // (tests) views whatever outlives it.
  std::string_view function, file, module, offset;
  int64_t line = 0;

  // The label's function part: function, else "<module basename>+<offset>", else "??".
  std::string Name() const;
  // The label's source part: "file:line", else the module path, else "??".
  std::string Source() const;
  // For summaries: "load_batch (train.py:88)" with the file's basename.
  std::string Short() const;
};

// The source of the frame "[thread: NAME]" that ends the stacks of a thread Python named.
inline constexpr std::string_view kThreadNameSource = "thread name";

class FrameTable {
 public:
  FrameTable();
  FrameTable(const FrameTable&) = delete;
  FrameTable& operator=(const FrameTable&) = delete;
  FrameTable(FrameTable&&) = default;
  FrameTable& operator=(FrameTable&&) = default;

  uint32_t Intern(const PythonFrame& f);
  uint32_t Intern(const NativeFrame& f);
  // A frame the viewer adds (thread state, GIL holder, thread name): shown as name@source.
  uint32_t InternSynthetic(std::string_view name, std::string_view source);
  // Adds a copy of a frame of another table; returns its id here.
  uint32_t InternCopy(const FrameInfo& f);

  // Whether id is the frame Intern(f) would return, without hashing: a caller that remembers the
  // id of the frame it met at the same place before (same thread, same depth, previous rank) checks
  // it with one comparison. Ranks of one job mostly repeat each other's stacks.
  bool Is(uint32_t id, const PythonFrame& f) const;
  bool Is(uint32_t id, const NativeFrame& f) const;

  const FrameInfo& operator[](uint32_t id) const { return (*frames_)[id]; }
  size_t size() const { return frames_ ? frames_->size() : 0; }  // 0 when moved from

 private:
  // The identity of a frame (see the top of this file).
  struct Key {
    FrameInfo::Origin origin;
    std::string_view function, file, module, offset;
    int64_t line;
    bool operator==(const Key&) const = default;
  };
  static Key KeyOf(FrameInfo::Origin origin, std::string_view function, std::string_view file, int64_t line,
                   std::string_view module, std::string_view offset);
  static Key KeyOf(const FrameInfo& f) { return KeyOf(f.origin, f.function, f.file, f.line, f.module, f.offset); }
  static size_t HashOf(const Key& k);
  // The index holds ids; it hashes and compares them through the frames they name, and a Key
  // looks one up without making a frame. The frames live behind a pointer so that the functors'
  // view of them survives moving the table.
  using Frames = std::deque<FrameInfo>;  // a deque: elements never move
  struct IdHash {
    using is_transparent = void;
    const Frames* frames;
    size_t operator()(uint32_t id) const { return HashOf(KeyOf((*frames)[id])); }
    size_t operator()(const Key& k) const { return HashOf(k); }
  };
  struct IdEq {
    using is_transparent = void;
    const Frames* frames;
    bool operator()(uint32_t a, uint32_t b) const { return a == b; }
    bool operator()(uint32_t a, const Key& k) const { return KeyOf((*frames)[a]) == k; }
    bool operator()(const Key& k, uint32_t a) const { return KeyOf((*frames)[a]) == k; }
  };
  uint32_t Find(const Key& key) const;  // kNone when absent
  uint32_t Insert(const Key& key, FrameKind kind, std::string_view module_for_info);
  static constexpr uint32_t kNone = ~uint32_t{0};

  std::unique_ptr<Frames> frames_;
  StringPool strings_;
  absl::flat_hash_set<uint32_t, IdHash, IdEq> index_;
};

}  // namespace xtimer
