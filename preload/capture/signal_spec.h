// Parses the signal names users write in XTIMER_DUMP_SIGNAL / XTIMER_CAPTURE_SIGNAL.
#pragma once

#include <string>
#include <string_view>

namespace xtimer::capture {

// "SIGUSR2", "USR2", "12", "SIGRTMIN+5", "RTMAX-2" -> the signal number;
// "none" / "off" / "0" -> 0 (disabled); anything else -> -1.
int ParseSignalSpec(std::string_view spec);

// "SIGUSR2", "SIGRTMIN+5", or the number for a signal without a name here.
std::string SignalName(int sig);

}  // namespace xtimer::capture
