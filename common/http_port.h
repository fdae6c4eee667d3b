// Listening sockets of our HTTP servers (agent /metrics, collector page). cpp-httplib 0.11 sets
// only SO_REUSEPORT on Linux: two servers could then bind one port and silently share its
// requests, and a restarted server can fail to rebind past TIME_WAIT. We want the usual
// behaviour instead: SO_REUSEADDR (rebinding after a restart works) and a second server on the
// same port fails with "address in use".
#pragma once

#include <httplib.h>
#include <sys/socket.h>

namespace xtimer {

inline void UseExclusivePort(httplib::Server& server) {
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
}

}  // namespace xtimer
