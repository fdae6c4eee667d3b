// The rank's first word to the node agent, said at load, before any thread of ours exists.
//
// A rank that has made no CUDA call has no link thread (agent_link.h), so without this the agent
// would not know it: a dump round could not reach it and the verdict would only call it missing.
// At load, in a rank (RANK set) below an agent (XTIMER_AGENT_SOCKET), ConnectAtLoad connects
// without blocking and SendHelloAtLoad sends one hello naming the rank, its pid and its dump
// signal ("link": false); the socket stays open, so the agent sees the rank live until it exits.
// The agent asks such a rank to dump by sending it that signal (once /proc/<pid>/status shows
// a handler for it); the dumper thread the signal starts reports the file over this socket
// (dump_written, from the dump observer). When the link thread starts (first CUDA call), it
// adopts the socket (TakeSocketFromLoad) and the agent talks to it by messages again.
// Nothing here blocks or starts a thread; without an agent the rank runs on as before. A forked
// child closes its copy (it is not the rank). Message formats: docs/formats.md, "Agent channel".
#pragma once

#include <string>

namespace xtimer {

// At load: connects to XTIMER_AGENT_SOCKET. False (and nothing kept) if it cannot.
bool ConnectAtLoad();
// At load, after ConnectAtLoad: the hello, and the dump observer that reports dumps until the
// link thread takes over.
void SendHelloAtLoad(int dump_signal);
// The link thread's start: the socket opened at load if it is still ours and connected to
// `path` (-1 if none); from now on the link thread reports dumps.
int TakeSocketFromLoad(const std::string& path);

}  // namespace xtimer
