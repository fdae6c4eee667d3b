#include "common/slowdown/step_json.h"

#include <limits>

namespace xtimer::slowdown {
namespace {

using J = nlohmann::json;

// Each reader returns false with *why naming the field; a missing optional field keeps *out.
bool Int(const J& j, const char* key, int64_t lo, int64_t hi, bool required, int64_t* out, std::string* why) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) *why = std::string("no \"") + key + "\"";
    return !required;
  }
  if (it->is_number_unsigned()) {
    uint64_t v = it->get<uint64_t>();
    if (v > static_cast<uint64_t>(hi)) return *why = std::string("\"") + key + "\" is out of range", false;
    *out = static_cast<int64_t>(v);
  } else if (it->is_number_integer()) {
    *out = it->get<int64_t>();
  } else {
    return *why = std::string("\"") + key + "\" is not an integer", false;
  }
  if (*out < lo || *out > hi) return *why = std::string("\"") + key + "\" is out of range", false;
  return true;
}

template <typename T>
bool IntAs(const J& j, const char* key, int64_t lo, int64_t hi, bool required, T* out, std::string* why) {
  int64_t v = static_cast<int64_t>(*out);
  if (!Int(j, key, lo, hi, required, &v, why)) return false;
  *out = static_cast<T>(v);
  return true;
}

bool Num(const J& j, const char* key, bool required, double* out, std::string* why) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) *why = std::string("no \"") + key + "\"";
    return !required;
  }
  if (!it->is_number()) return *why = std::string("\"") + key + "\" is not a number", false;
  *out = it->get<double>();
  return true;
}

bool Str(const J& j, const char* key, bool required, std::string* out, std::string* why) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) *why = std::string("no \"") + key + "\"";
    return !required;
  }
  if (!it->is_string()) return *why = std::string("\"") + key + "\" is not a string", false;
  *out = it->get<std::string>();
  return true;
}

// An array field: nullptr (fine) when absent, else the array; false when it is something else.
bool Array(const J& j, const char* key, const J** out, std::string* why) {
  *out = nullptr;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_array()) return *why = std::string("\"") + key + "\" is not an array", false;
  *out = &*it;
  return true;
}

constexpr int64_t kMaxI64 = std::numeric_limits<int64_t>::max();
constexpr int64_t kMaxU32 = std::numeric_limits<uint32_t>::max();

bool Entry(const J& e, const char* array, std::string* why) {
  if (e.is_object()) return true;
  return *why = std::string("an element of \"") + array + "\" is not an object", false;
}

// Names the array in the reason: `"colls": "seq" is not an integer`.
bool In(const char* array, bool ok, std::string* why) {
  if (!ok) *why = std::string("\"") + array + "\": " + *why;
  return ok;
}

}  // namespace

bool StepRecordFromJson(const J& j, StepRecord* out, std::string* why) {
  if (!j.is_object()) return *why = "not a JSON object", false;
  StepRecord r;
  int64_t version = 1;
  if (!Int(j, "v", 0, kMaxI64, false, &version, why)) return false;
  if (version != 1) return *why = "version " + std::to_string(version) + " (this reader knows 1)", false;
  if (!IntAs(j, "rank", 0, StepLimits::kMaxWorld, true, &r.rank, why) ||
      !IntAs(j, "world", 1, StepLimits::kMaxWorld, true, &r.world, why) || !Str(j, "node", false, &r.node, why) ||
      !Int(j, "pid", 0, kMaxI64, false, &r.pid, why) || !Int(j, "step", -kMaxI64, kMaxI64, false, &r.step, why) ||
      !Num(j, "t_begin", true, &r.t_begin, why) || !Num(j, "t_end", true, &r.t_end, why) ||
      !Num(j, "gpu_busy_s", false, &r.gpu_busy_s, why) || !Num(j, "gpu_idle_s", false, &r.gpu_idle_s, why) ||
      !Num(j, "issue_latency_s", false, &r.issue_latency_s, why) || !Num(j, "gc_s", false, &r.gc_s, why) ||
      !Num(j, "data_s", false, &r.data_s, why))
    return false;
  const J* a = nullptr;
  if (!Array(j, "kernels", &a, why)) return false;
  if (a != nullptr)
    for (const J& e : *a) {
      if (r.kernels.size() >= StepLimits::kMaxKernels) break;
      KernelTime k;
      if (!Entry(e, "kernels", why) ||
          !In("kernels",
              Str(e, "sig", true, &k.sig, why) && IntAs(e, "n", 0, kMaxU32, false, &k.n, why) &&
                  Num(e, "s", true, &k.s, why) && Num(e, "tflops", false, &k.tflops, why),
              why))
        return false;
      r.kernels.push_back(std::move(k));
    }
  if (!Array(j, "colls", &a, why)) return false;
  if (a != nullptr)
    for (const J& e : *a) {
      if (r.colls.size() >= StepLimits::kMaxColls) break;
      CollTime c;
      // Unknown GPU times (null) leave NaN: CheckStepRecord drops that collective, not the record.
      c.start = c.end = std::numeric_limits<double>::quiet_NaN();
      if (!Entry(e, "colls", why) ||
          !In("colls",
              Str(e, "comm", true, &c.comm, why) && Int(e, "seq", -kMaxI64, kMaxI64, true, &c.seq, why) &&
                  Str(e, "op", false, &c.op, why) && IntAs(e, "bytes", 0, kMaxI64, false, &c.bytes, why) &&
                  IntAs(e, "ranks", 1, StepLimits::kMaxWorld, true, &c.ranks, why) &&
                  Num(e, "call", false, &c.call, why) && Num(e, "start", false, &c.start, why) &&
                  Num(e, "end", false, &c.end, why),
              why))
        return false;
      r.colls.push_back(std::move(c));
    }
  if (!Array(j, "samples", &a, why)) return false;
  if (a != nullptr)
    for (const J& e : *a) {
      if (r.samples.size() >= StepLimits::kMaxSamples) break;
      StackSample s;
      if (!Entry(e, "samples", why) ||
          !In("samples", Str(e, "frames", true, &s.frames, why) && IntAs(e, "n", 1, kMaxU32, true, &s.n, why), why))
        return false;
      r.samples.push_back(std::move(s));
    }
  if (!CheckStepRecord(&r, why)) return false;
  *out = std::move(r);
  return true;
}

bool ParseStepLine(std::string_view line, StepRecord* out, std::string* why) {
  J j = J::parse(line.begin(), line.end(), nullptr, false);
  if (j.is_discarded()) return *why = "not JSON (a truncated or corrupt line)", false;
  return StepRecordFromJson(j, out, why);
}

J StepRecordToJson(const StepRecord& r) {
  J j = {{"v", 1},
         {"rank", r.rank},
         {"world", r.world},
         {"node", r.node},
         {"pid", r.pid},
         {"step", r.step},
         {"t_begin", r.t_begin},
         {"t_end", r.t_end},
         {"gpu_busy_s", r.gpu_busy_s},
         {"gpu_idle_s", r.gpu_idle_s},
         {"issue_latency_s", r.issue_latency_s},
         {"gc_s", r.gc_s},
         {"data_s", r.data_s}};
  J& kernels = j["kernels"] = J::array();
  for (const KernelTime& k : r.kernels)
    kernels.push_back({{"sig", k.sig}, {"n", k.n}, {"s", k.s}, {"tflops", k.tflops}});
  J& colls = j["colls"] = J::array();
  for (const CollTime& c : r.colls)
    colls.push_back({{"comm", c.comm},
                     {"seq", c.seq},
                     {"op", c.op},
                     {"bytes", c.bytes},
                     {"ranks", c.ranks},
                     {"call", c.call},
                     {"start", c.start},
                     {"end", c.end}});
  if (!r.samples.empty()) {
    J& samples = j["samples"] = J::array();
    for (const StackSample& s : r.samples) samples.push_back({{"frames", s.frames}, {"n", s.n}});
  }
  return j;
}

}  // namespace xtimer::slowdown
