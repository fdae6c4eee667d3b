#include "netprobe/messages.h"

#include "netprobe/wire.h"

namespace xtimer::netprobe {

bool SendMessage(int fd, const nlohmann::json& msg, net::Deadline deadline, std::string* error) {
  std::string frame = EncodeFrame(msg);
  if (frame.size() - kHeaderBytes > kMaxPayload) {
    *error = "message too large to send";
    return false;
  }
  return net::SendAll(fd, frame.data(), frame.size(), deadline, error);
}

bool RecvMessage(int fd, nlohmann::json* msg, net::Deadline deadline, std::string* error) {
  unsigned char header[kHeaderBytes];
  if (!net::RecvAll(fd, header, sizeof header, deadline, error)) return false;
  uint32_t n = 0;
  if (!DecodeHeader(header, &n, error)) return false;
  std::string payload(n, '\0');
  if (!net::RecvAll(fd, payload.data(), n, deadline, error)) {
    if (error->rfind("connection closed", 0) == 0) *error += " (message truncated)";
    return false;
  }
  return DecodePayload(payload.data(), n, msg, error);
}

}  // namespace xtimer::netprobe
