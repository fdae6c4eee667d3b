#include "ckpt/image.h"

#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/identity.h"

namespace xtimer::ckpt {
namespace {

using nlohmann::json;

struct DtypeRow {
  const char* name;
  int size;
};
constexpr DtypeRow kDtypes[] = {
    {"float32", 4}, {"float64", 8},   {"float16", 2},     {"bfloat16", 2},  {"int8", 1},          {"uint8", 1},
    {"int16", 2},   {"int32", 4},     {"int64", 8},       {"bool", 1},      {"uint16", 2},        {"uint32", 4},
    {"uint64", 8},  {"complex64", 8}, {"complex128", 16}, {"complex32", 4}, {"float8_e4m3fn", 1}, {"float8_e5m2", 1},
};

bool MulOverflow(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

}  // namespace

int DtypeSize(const std::string& dtype) {
  for (const auto& row : kDtypes)
    if (dtype == row.name) return row.size;
  return 0;
}

uint64_t PlanData(const std::vector<uint64_t>& nbytes, std::vector<uint64_t>* offsets) {
  offsets->resize(nbytes.size());
  uint64_t pos = kDataOffset;
  for (size_t i = 0; i < nbytes.size(); ++i) {
    (*offsets)[i] = pos;
    pos += (nbytes[i] + kEntryAlign - 1) / kEntryAlign * kEntryAlign;
  }
  return pos;
}

std::string BuildIndex(const ImageInfo& info, const std::vector<Entry>& entries) {
  json j = json::object();
  j["format"] = "xtimer-ckpt";
  j["version"] = kImageVersion;
  j["step"] = info.step;
  j["rank"] = info.rank;
  j["world_size"] = info.world_size;
  j["created"] = IsoUtc(WallNs());
  j["host"] = HostName();
  j["pid"] = static_cast<int>(getpid());
  json list = json::array();
  for (const Entry& e : entries) {
    list.push_back({{"name", e.name},
                    {"dtype", e.dtype},
                    {"shape", e.shape},
                    {"device", e.device},
                    {"offset", e.offset},
                    {"nbytes", e.nbytes},
                    {"checksum", e.sum.ToHex()}});
  }
  j["entries"] = std::move(list);
  // The tree is spliced in verbatim: it is JSON already (written by the Python side).
  std::string out = j.dump();
  out.pop_back();
  out += ",\"tree\":";
  out += info.tree_json.empty() ? "null" : info.tree_json;
  out += "}";
  return out;
}

void WriteHeader(void* image, int64_t step, uint64_t index_off, const std::string& index) {
  ImageHeader h{};
  std::memcpy(h.magic, kImageMagic, 8);
  h.version = kImageVersion;
  h.header_len = kHeaderLen;
  h.step = step;
  h.data_off = kDataOffset;
  h.index_off = index_off;
  h.index_len = index.size();
  Checksum is = ChecksumOf(index.data(), index.size());
  h.index_sum_a = is.a;
  h.index_sum_b = is.b;
  Checksum hs = ChecksumOf(&h, 64);
  h.head_sum_a = hs.a;
  h.head_sum_b = hs.b;
  std::memcpy(image, &h, sizeof h);
}

Status ParseHeader(const void* header, uint64_t file_size, const std::string& what, ImageHeader* out) {
  if (file_size < kHeaderLen)
    return Status::Corrupt(what + ": truncated (" + std::to_string(file_size) + " bytes, no header)");
  ImageHeader h;
  std::memcpy(&h, header, sizeof h);
  if (std::memcmp(h.magic, kImageMagic, 8) != 0)
    return Status::Corrupt(what + ": not an xtimer checkpoint (bad magic)");
  Checksum hs = ChecksumOf(&h, 64);
  if (hs.a != h.head_sum_a || hs.b != h.head_sum_b)
    return Status::Corrupt(what + ": header checksum mismatch (the file is corrupt)");
  if (h.version > kImageVersion)
    return Status::Error(what + ": format version " + std::to_string(h.version) +
                         " is newer than this xtimer understands (" + std::to_string(kImageVersion) +
                         "); upgrade xtimer");
  if (h.header_len != kHeaderLen || h.data_off < kHeaderLen || h.index_off < h.data_off || h.index_len == 0 ||
      h.index_off + h.index_len < h.index_off)
    return Status::Corrupt(what + ": header fields out of range");
  if (h.index_off + h.index_len != file_size)
    return Status::Corrupt(what + ": size " + std::to_string(file_size) + " bytes, header says " +
                           std::to_string(h.index_off + h.index_len) + " (truncated or appended to)");
  *out = h;
  return Status::Ok();
}

Status ParseIndex(const ImageHeader& h, const std::string& index, const std::string& what, Index* out) {
  Checksum is = ChecksumOf(index.data(), index.size());
  if (is.a != h.index_sum_a || is.b != h.index_sum_b)
    return Status::Corrupt(what + ": index checksum mismatch (the file is corrupt)");
  json j = json::parse(index, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::Corrupt(what + ": index is not valid JSON");
  try {
    if (j.value("format", "") != "xtimer-ckpt") return Status::Corrupt(what + ": index format is not xtimer-ckpt");
    Index idx;
    idx.info.step = j.at("step").get<int64_t>();
    idx.info.rank = j.at("rank").get<int>();
    idx.info.world_size = j.at("world_size").get<int>();
    if (idx.info.step != h.step) return Status::Corrupt(what + ": step in header and index differ");
    if (idx.info.rank < 0 || idx.info.world_size < 1 || idx.info.rank >= idx.info.world_size)
      return Status::Corrupt(what + ": rank/world_size out of range");
    for (const json& e : j.at("entries")) {
      Entry en;
      en.name = e.at("name").get<std::string>();
      en.dtype = e.at("dtype").get<std::string>();
      en.device = e.at("device").get<std::string>();
      en.shape = e.at("shape").get<std::vector<int64_t>>();
      en.offset = e.at("offset").get<uint64_t>();
      en.nbytes = e.at("nbytes").get<uint64_t>();
      if (!Checksum::FromHex(e.at("checksum").get<std::string>(), &en.sum))
        return Status::Corrupt(what + ": entry " + en.name + ": bad checksum field");
      int size = DtypeSize(en.dtype);
      if (size == 0) return Status::Corrupt(what + ": entry " + en.name + ": unknown dtype " + en.dtype);
      uint64_t n = static_cast<uint64_t>(size);
      for (int64_t d : en.shape)
        if (d < 0 || MulOverflow(n, static_cast<uint64_t>(d), &n))
          return Status::Corrupt(what + ": entry " + en.name + ": bad shape");
      if (n != en.nbytes) return Status::Corrupt(what + ": entry " + en.name + ": nbytes does not match shape");
      if (en.offset < h.data_off || en.offset + en.nbytes < en.offset || en.offset + en.nbytes > h.index_off)
        return Status::Corrupt(what + ": entry " + en.name + ": data outside the file's data area");
      idx.entries.push_back(std::move(en));
    }
    idx.index_json = index;
    idx.image_len = h.index_off + h.index_len;
    *out = std::move(idx);
  } catch (const json::exception& e) {
    return Status::Corrupt(what + ": index is malformed (" + e.what() + ")");
  }
  return Status::Ok();
}

Status ParseImage(const void* image, uint64_t size, const std::string& what, Index* out) {
  ImageHeader h;
  if (size < kHeaderLen) return Status::Corrupt(what + ": truncated (no header)");
  // For an image in memory `size` is what is mapped; the header says how long the image is.
  std::memcpy(&h, image, sizeof h);
  uint64_t len = h.index_off + h.index_len;
  if (len < h.index_off || len > size) len = size;  // let ParseHeader report the mismatch
  XT_RETURN_IF_ERROR(ParseHeader(image, len, what, &h));
  std::string index(static_cast<const char*>(image) + h.index_off, h.index_len);
  return ParseIndex(h, index, what, out);
}

Status VerifyData(const void* image, const Index& index, const std::string& what) {
  const auto* base = static_cast<const unsigned char*>(image);
  for (const Entry& e : index.entries) {
    if (ChecksumOf(base + e.offset, e.nbytes) != e.sum)
      return Status::Corrupt(what + ": checksum mismatch in entry " + e.name + " (the data is corrupt)");
  }
  return Status::Ok();
}

}  // namespace xtimer::ckpt
