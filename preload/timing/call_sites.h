// Python call sites of collective calls, for the fingerprints (comm_table.h): the innermost frame
// outside torch and xtimer, "func (file:line)", as the Python hook module (preload/steps/python/)
// finds it around each torch.distributed collective and each backward pass.
//
// A site is registered once (Register: its text copied into a fixed table, an id handed back)
// and then named by its id. A collective takes the id of its own thread (set by the hook module
// around the torch.distributed call) or else the process' backward site (set around
// torch.autograd.backward, for the all-reduces DDP's reducer issues from autograd's threads).
// Everything here is lock-free: an atomic counter claims a slot, a release store publishes it.
#pragma once

#include <cstdint>

namespace xtimer::sites {

inline constexpr uint32_t kMaxSites = 1024;  // distinct call sites of one process
inline constexpr uint32_t kMaxText = 160;    // bytes kept of a site's text, NUL included

// The id of `text` (a fresh one each call: the caller keeps its own map), 0 if the table is full
// or the text is empty.
uint32_t Register(const char* text);
// The published text of `id`, or nullptr (0, unknown, not yet published).
const char* Text(uint32_t id);

// This thread's site; returns the previous one (the caller restores it).
uint32_t SwapThreadSite(uint32_t id);
// The process' backward site; returns the previous one.
uint32_t SwapBackwardSite(uint32_t id);
// Launch path: the site of a collective called now on this thread (its own, else the backward
// site, else 0).
uint32_t Current();

}  // namespace xtimer::sites
