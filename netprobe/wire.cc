#include "netprobe/wire.h"

#include <cmath>
#include <cstring>

namespace xtimer::netprobe {
namespace {

constexpr unsigned char kMagic[4] = {'X', 'T', 'N', 'P'};

std::string Printable(const unsigned char* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += (p[i] >= 0x20 && p[i] < 0x7f) ? static_cast<char>(p[i]) : '.';
  return s;
}

}  // namespace

std::string EncodeFrame(const nlohmann::json& msg) {
  std::string payload = msg.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string frame(kHeaderBytes, '\0');
  std::memcpy(frame.data(), kMagic, 4);
  uint32_t n = static_cast<uint32_t>(payload.size());
  frame[4] = static_cast<char>(n >> 24);
  frame[5] = static_cast<char>(n >> 16);
  frame[6] = static_cast<char>(n >> 8);
  frame[7] = static_cast<char>(n);
  return frame + payload;
}

bool DecodeHeader(const unsigned char* h, uint32_t* length, std::string* error) {
  if (std::memcmp(h, kMagic, 4) != 0) {
    *error = "not an xtimer_netprobe peer (frame starts with '" + Printable(h, 4) + "', expected 'XTNP')";
    return false;
  }
  uint32_t n = (uint32_t{h[4]} << 24) | (uint32_t{h[5]} << 16) | (uint32_t{h[6]} << 8) | h[7];
  if (n > kMaxPayload) {
    *error =
        "message of " + std::to_string(n) + " bytes exceeds the limit of " + std::to_string(kMaxPayload) + " bytes";
    return false;
  }
  if (n == 0) {
    *error = "empty message";
    return false;
  }
  *length = n;
  return true;
}

bool DecodePayload(const char* data, size_t n, nlohmann::json* msg, std::string* error) {
  nlohmann::json j = nlohmann::json::parse(data, data + n, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    *error = "malformed message (not JSON)";
    return false;
  }
  if (!j.is_object()) {
    *error = "malformed message (not a JSON object)";
    return false;
  }
  auto it = j.find("type");
  if (it == j.end() || !it->is_string()) {
    *error = "malformed message (no string field 'type')";
    return false;
  }
  *msg = std::move(j);
  return true;
}

FrameDecoder::Status FrameDecoder::Next(nlohmann::json* msg, std::string* error) {
  // Reject a wrong magic as soon as its bytes are here, before waiting for a length.
  size_t have = std::min<size_t>(buf_.size(), 4);
  if (std::memcmp(buf_.data(), kMagic, have) != 0) {
    unsigned char h[kHeaderBytes] = {};
    std::memcpy(h, buf_.data(), have);
    DecodeHeader(h, nullptr, error);
    return Status::kError;
  }
  if (buf_.size() < kHeaderBytes) return Status::kNeedMore;
  uint32_t n = 0;
  if (!DecodeHeader(reinterpret_cast<const unsigned char*>(buf_.data()), &n, error)) return Status::kError;
  if (buf_.size() < kHeaderBytes + n) return Status::kNeedMore;
  bool ok = DecodePayload(buf_.data() + kHeaderBytes, n, msg, error);
  buf_.erase(0, kHeaderBytes + n);
  return ok ? Status::kFrame : Status::kError;
}

Fields::Fields(const nlohmann::json& msg, std::string* error) : msg_(msg), error_(error) {
  auto it = msg.find("type");
  type_ = (it != msg.end() && it->is_string()) ? it->get<std::string>() : "?";
}

bool Fields::Fail(const char* key, const char* what) {
  *error_ = "message '" + type_ + "': field '" + key + "' " + what;
  return false;
}

bool Fields::Has(const char* key) const { return msg_.contains(key); }

bool Fields::Int(const char* key, int64_t lo, int64_t hi, int64_t* out) {
  auto it = msg_.find(key);
  if (it == msg_.end()) return Fail(key, "is missing");
  if (!it->is_number_integer()) return Fail(key, "is not an integer");
  int64_t v = it->is_number_unsigned() && it->get<uint64_t>() > INT64_MAX ? INT64_MAX : it->get<int64_t>();
  if (v < lo || v > hi) return Fail(key, "is out of range");
  *out = v;
  return true;
}

bool Fields::Int(const char* key, int lo, int hi, int* out) {
  int64_t v = 0;
  if (!Int(key, static_cast<int64_t>(lo), static_cast<int64_t>(hi), &v)) return false;
  *out = static_cast<int>(v);
  return true;
}

bool Fields::Num(const char* key, double* out) {
  auto it = msg_.find(key);
  if (it == msg_.end()) return Fail(key, "is missing");
  if (!it->is_number()) return Fail(key, "is not a number");
  double v = it->get<double>();
  if (!std::isfinite(v)) return Fail(key, "is not finite");
  *out = v;
  return true;
}

bool Fields::Str(const char* key, std::string* out, size_t max_len) {
  auto it = msg_.find(key);
  if (it == msg_.end()) return Fail(key, "is missing");
  if (!it->is_string()) return Fail(key, "is not a string");
  const std::string& s = it->get_ref<const std::string&>();
  if (s.size() > max_len) return Fail(key, "is too long");
  *out = s;
  return true;
}

bool Fields::Bool(const char* key, bool* out) {
  auto it = msg_.find(key);
  if (it == msg_.end()) return Fail(key, "is missing");
  if (!it->is_boolean()) return Fail(key, "is not true/false");
  *out = it->get<bool>();
  return true;
}

}  // namespace xtimer::netprobe
