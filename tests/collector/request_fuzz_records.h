// The collector request fuzz target's input format (request_fuzz.cc): records of
// [kind byte][length, 2 bytes little-endian][length bytes]; a record cut short ends the input.
// Shared by the target and the seed writer (request_fuzz_seeds.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace xtimer::fuzz {

enum RecordKind : uint8_t {
  kRegister = 0,
  kReport = 1,
  kUpload = 2,
  kTick = 3,
  kDisconnect = 4,
  kRoundFile = 5,
  kSteps = 6,
};
inline constexpr int kRecordKinds = 7;

struct Record {
  uint8_t kind;  // RecordKind: (kind & 0x7f) % kRecordKinds; bit 7 on a report: take the DUMP with the reply
  std::string_view bytes;
};

inline std::vector<Record> SplitRecords(std::string_view in) {
  std::vector<Record> out;
  while (in.size() >= 3 && out.size() < 4096) {
    uint8_t kind = static_cast<uint8_t>(in[0]);
    size_t len = static_cast<uint8_t>(in[1]) | (size_t{static_cast<uint8_t>(in[2])} << 8);
    in.remove_prefix(3);
    if (len > in.size()) break;
    out.push_back({kind, in.substr(0, len)});
    in.remove_prefix(len);
  }
  return out;
}

inline void AppendRecord(std::string* out, uint8_t kind, std::string_view bytes) {
  size_t len = bytes.size() > 0xffff ? 0xffff : bytes.size();
  out->push_back(static_cast<char>(kind));
  out->push_back(static_cast<char>(len & 0xff));
  out->push_back(static_cast<char>(len >> 8));
  out->append(bytes.substr(0, len));
}

}  // namespace xtimer::fuzz
