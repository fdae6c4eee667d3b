// Process-wide settings for every xtimer program that speaks gRPC (collector, node agent, load
// generator). Call once, before the first channel or server.
#pragma once

namespace xtimer {

// Debian builds abseil without NDEBUG, which leaves absl::Mutex's deadlock detection on inside
// gRPC: every lock taken updates a global graph of lock orders (GraphCycles showed up in the
// collector's profile under load). It is a debugging aid; xtimer turns it off.
void UseGrpcDefaults();

}  // namespace xtimer
