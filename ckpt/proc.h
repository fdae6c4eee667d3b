// Process tags: a pid plus the low 24 bits of its start time, packed in 56 bits, so that a
// lock or an owner field left behind by a dead process is recognised even after its pid was
// reused. The top 8 bits of a 64-bit word are free for a "kind".
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace xtimer::ckpt {

// This process's tag (computed once per process; fork-aware).
uint64_t SelfTag();
// The tag of a running process, or 0 if it does not exist or is a zombie.
uint64_t TagOf(pid_t pid);
// True if the process named by `tag` (kind bits ignored) still runs.
bool TagAlive(uint64_t tag);

inline pid_t TagPid(uint64_t tag) { return static_cast<pid_t>(tag & 0xffffffffu); }
inline uint64_t TagOnly(uint64_t word) { return word & ((1ull << 56) - 1); }
inline uint8_t TagKind(uint64_t word) { return static_cast<uint8_t>(word >> 56); }
inline uint64_t WithKind(uint64_t tag, uint8_t kind) { return TagOnly(tag) | (static_cast<uint64_t>(kind) << 56); }

}  // namespace xtimer::ckpt
