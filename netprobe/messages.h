// One rendezvous message (wire.h's frame) each way over a socket of common/net, against a
// deadline: the probe's control channel.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/net/net.h"

namespace xtimer::netprobe {

bool SendMessage(int fd, const nlohmann::json& msg, net::Deadline deadline, std::string* error);
bool RecvMessage(int fd, nlohmann::json* msg, net::Deadline deadline, std::string* error);

}  // namespace xtimer::netprobe
