// The rendezvous wire format: frames of "XTNP", a 4-byte big-endian payload length, and a JSON
// object payload with a string "type". Decoding is pure and validates everything: bad magic,
// oversized lengths, malformed JSON and missing or mistyped fields give a one-line error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace xtimer::netprobe {

inline constexpr int kProtocolVersion = 2;  // 2: the "stop" message (early stop)
inline constexpr size_t kHeaderBytes = 8;
inline constexpr uint32_t kMaxPayload = 8u << 20;

std::string EncodeFrame(const nlohmann::json& msg);

// Checks an 8-byte header; on success *length is the payload length.
bool DecodeHeader(const unsigned char* header, uint32_t* length, std::string* error);
// Parses a payload: a JSON object with a string "type".
bool DecodePayload(const char* data, size_t n, nlohmann::json* msg, std::string* error);

// Incremental decoder for a byte stream (non-blocking sockets).
class FrameDecoder {
 public:
  enum class Status { kNeedMore, kFrame, kError };
  void Feed(const char* data, size_t n) { buf_.append(data, n); }
  // kFrame: *msg holds the next message. kError: the stream is unusable; *error says why.
  Status Next(nlohmann::json* msg, std::string* error);
  size_t buffered() const { return buf_.size(); }

 private:
  std::string buf_;
};

// Typed, checked access to the fields of a message; errors name the message type and field.
class Fields {
 public:
  Fields(const nlohmann::json& msg, std::string* error);
  bool Int(const char* key, int64_t lo, int64_t hi, int64_t* out);
  bool Int(const char* key, int lo, int hi, int* out);
  bool Num(const char* key, double* out);  // finite number
  bool Str(const char* key, std::string* out, size_t max_len = 4096);
  bool Bool(const char* key, bool* out);
  bool Has(const char* key) const;

 private:
  bool Fail(const char* key, const char* what);
  const nlohmann::json& msg_;
  std::string* error_;
  std::string type_;
};

}  // namespace xtimer::netprobe
