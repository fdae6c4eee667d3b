// One node of a network check: joins the rendezvous (hosting it first when this is node 0 and
// the rendezvous address is one of ours), runs the tests it is told to run, prints the progress
// and the final table, writes the JSON report. Returns the exit status (0, 1 or 2).
#pragma once

#include "netprobe/options.h"

namespace xtimer::netprobe {

int RunNode(const Options& options);
// --serve: the rendezvous alone.
int RunServe(const Options& options);

}  // namespace xtimer::netprobe
