#include "common/steps/step_json.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/utf8_text.h"

namespace xtimer::slowdown {
namespace {

using J = nlohmann::json;

// Each reader takes the value (nullptr: absent) and the field's name, and returns false with *why
// naming the field; a missing optional field keeps *out.
bool IntValue(const J* it, const char* key, int64_t lo, int64_t hi, bool required, int64_t* out, std::string* why) {
  if (it == nullptr || it->is_null()) {
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

bool NumValue(const J* it, const char* key, bool required, double* out, std::string* why) {
  if (it == nullptr || it->is_null()) {
    if (required) *why = std::string("no \"") + key + "\"";
    return !required;
  }
  if (!it->is_number()) return *why = std::string("\"") + key + "\" is not a number", false;
  *out = it->get<double>();
  return true;
}

bool StrValue(const J* it, const char* key, bool required, std::string* out, std::string* why) {
  if (it == nullptr || it->is_null()) {
    if (required) *why = std::string("no \"") + key + "\"";
    return !required;
  }
  if (!it->is_string()) return *why = std::string("\"") + key + "\" is not a string", false;
  *out = it->get<std::string>();
  return true;
}

// A field of an object, or element `i` of an array (named `key` in the error).
const J* Find(const J& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}
const J* At(const J& a, size_t i) { return i < a.size() ? &a[i] : nullptr; }

bool Int(const J& j, const char* key, int64_t lo, int64_t hi, bool required, int64_t* out, std::string* why) {
  return IntValue(Find(j, key), key, lo, hi, required, out, why);
}
bool Num(const J& j, const char* key, bool required, double* out, std::string* why) {
  return NumValue(Find(j, key), key, required, out, why);
}
bool Str(const J& j, const char* key, bool required, std::string* out, std::string* why) {
  return StrValue(Find(j, key), key, required, out, why);
}

template <typename T>
bool IntAs(const J& j, const char* key, int64_t lo, int64_t hi, bool required, T* out, std::string* why) {
  int64_t v = static_cast<int64_t>(*out);
  if (!Int(j, key, lo, hi, required, &v, why)) return false;
  *out = static_cast<T>(v);
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

namespace {

// Relative times and durations of layout 2, in microseconds: at most about 3 years either way, so
// that their sums cannot overflow.
constexpr int64_t kMaxMicros = int64_t{1} << 56;

bool Tuple(const J& e, const char* array, std::string* why) {
  if (e.is_array()) return true;
  return *why = std::string("an element of \"") + array + "\" is not an array", false;
}

const char* const kUnresolvedHint = " (the file's start or a dictionary line is missing)";

}  // namespace

StepFileReader::Line StepFileReader::Take(std::string_view line, StepRecord* out, std::string* why) {
  J j = J::parse(line.begin(), line.end(), nullptr, false);
  if (j.is_discarded()) return *why = "not JSON (a truncated or corrupt line)", Line::kBad;
  if (!j.is_object()) return *why = "not a JSON object", Line::kBad;
  if (j.contains("d")) return Dictionary(j, why);
  if (j.contains("v") || j.contains("rank")) {
    int64_t version = 1;
    if (!Int(j, "v", 0, kMaxI64, false, &version, why)) return Line::kBad;
    if (version == 2) return Header(j, why);
    return StepRecordFromJson(j, out, why) ? Line::kRecord : Line::kBad;
  }
  if (j.contains("step")) return Step(j, out, why);
  return *why = "neither a step record nor a header or dictionary line", Line::kBad;
}

StepFileReader::Line StepFileReader::Header(const J& j, std::string* why) {
  // A new header starts a new part of the file: nothing before it applies after it.
  header_ = false;
  sigs_.clear();
  frames_.clear();
  colls_.clear();
  bytes_ = 0;
  StepRecord who;
  int64_t t0 = 0;
  if (!IntAs(j, "rank", 0, StepLimits::kMaxWorld, true, &who.rank, why) ||
      !IntAs(j, "world", 1, StepLimits::kMaxWorld, true, &who.world, why) || !Str(j, "node", false, &who.node, why) ||
      !Int(j, "pid", 0, kMaxI64, false, &who.pid, why) || !Int(j, "t0", 0, 100'000'000'000, true, &t0, why))
    return Line::kBad;
  CutUtf8(&who.node, StepLimits::kMaxNode);
  who_ = std::move(who);
  t0_us_ = t0 * 1'000'000;
  header_ = true;
  return Line::kMeta;
}

StepFileReader::Line StepFileReader::Dictionary(const J& j, std::string* why) {
  std::string table;
  int64_t first = 0;
  const J* add = nullptr;
  if (!Str(j, "d", true, &table, why) || !Int(j, "i", 0, kMaxEntries, true, &first, why) || !Array(j, "add", &add, why))
    return Line::kBad;
  if (add == nullptr) return *why = "no \"add\"", Line::kBad;
  if (!header_)
    return *why = std::string("a dictionary line before any header line") + kUnresolvedHint, Line::kUnresolved;
  if (static_cast<size_t>(first) + add->size() > kMaxEntries)
    return *why = "a dictionary of more than " + std::to_string(kMaxEntries) + " entries", Line::kBad;
  // Read whole before anything is taken: a bad entry leaves the dictionary as it was.
  std::vector<std::optional<std::string>>* strings = nullptr;
  size_t cut = 0;
  if (table == "sig") {
    strings = &sigs_, cut = StepLimits::kMaxSig;
  } else if (table == "frames") {
    strings = &frames_, cut = StepLimits::kMaxFrames;
  } else if (table != "coll") {
    return Line::kMeta;  // a table of a newer writer: ignored, as unknown fields are
  }
  std::vector<std::string> texts;
  std::vector<Coll> colls;
  size_t bytes = 0;
  for (const J& e : *add) {
    if (strings != nullptr) {
      std::string s;
      if (!In("add", StrValue(&e, table.c_str(), true, &s, why), why)) return Line::kBad;
      CutUtf8(&s, cut);
      bytes += s.size();
      texts.push_back(std::move(s));
      continue;
    }
    Coll c;
    int64_t size = 0, ranks = 0;
    if (!In("add",
            Tuple(e, "add", why) && StrValue(At(e, 0), "comm", true, &c.comm, why) &&
                StrValue(At(e, 1), "op", true, &c.op, why) &&
                IntValue(At(e, 2), "bytes", 0, kMaxI64, true, &size, why) &&
                IntValue(At(e, 3), "ranks", 1, StepLimits::kMaxWorld, true, &ranks, why),
            why))
      return Line::kBad;
    c.bytes = static_cast<uint64_t>(size);
    c.ranks = static_cast<int32_t>(ranks);
    CutUtf8(&c.comm, StepLimits::kMaxComm);
    CutUtf8(&c.op, StepLimits::kMaxOp);
    bytes += c.comm.size() + c.op.size();
    colls.push_back(std::move(c));
  }
  if (bytes_ + bytes > kMaxBytes)
    return *why = "dictionaries of more than " + std::to_string(kMaxBytes >> 20) + " MiB", Line::kBad;
  bytes_ += bytes;
  auto put = [first = static_cast<size_t>(first)](auto& entries, auto& items) {
    if (entries.size() < first + items.size()) entries.resize(first + items.size());
    for (size_t i = 0; i < items.size(); ++i) entries[first + i] = std::move(items[i]);
  };
  if (strings != nullptr) {
    put(*strings, texts);
  } else {
    put(colls_, colls);
  }
  return Line::kMeta;
}

StepFileReader::Line StepFileReader::Step(const J& j, StepRecord* out, std::string* why) {
  if (!header_) return *why = std::string("a step line before any header line") + kUnresolvedHint, Line::kUnresolved;
  StepRecord r;
  r.rank = who_.rank;
  r.world = who_.world;
  r.node = who_.node;
  r.pid = who_.pid;
  int64_t t = 0, len = 0;
  double busy = 0, idle = std::numeric_limits<double>::quiet_NaN(), lat = 0, gc = 0, dl = 0;
  if (!Int(j, "step", -kMaxI64, kMaxI64, true, &r.step, why) || !Int(j, "t", -kMaxMicros, kMaxMicros, true, &t, why) ||
      !Int(j, "len", -kMaxMicros, kMaxMicros, true, &len, why) || !Num(j, "busy", false, &busy, why) ||
      !Num(j, "idle", false, &idle, why) || !Num(j, "lat", false, &lat, why) || !Num(j, "gc", false, &gc, why) ||
      !Num(j, "dl", false, &dl, why))
    return Line::kBad;
  const int64_t begin = t0_us_ + t;
  auto seconds = [](double us) { return us / 1e6; };
  r.t_begin = seconds(static_cast<double>(begin));
  r.t_end = seconds(static_cast<double>(begin + len));
  r.gpu_busy_s = seconds(busy);
  // Left out when it is the step's length less the busy time.
  r.gpu_idle_s = std::isnan(idle) ? seconds(std::max(0.0, static_cast<double>(len) - busy)) : seconds(idle);
  r.issue_latency_s = seconds(lat);
  r.gc_s = seconds(gc);
  r.data_s = seconds(dl);

  // Unknown dictionary entries: the first one met is the reason, after every type is checked.
  std::string unresolved;
  auto lookup = [&](const auto& table, int64_t i, const char* what) -> decltype(&*table[0]) {
    if (static_cast<size_t>(i) < table.size() && table[i].has_value()) return &*table[i];
    if (unresolved.empty())
      unresolved = std::string(what) + " " + std::to_string(i) + " is in no dictionary line before it";
    return nullptr;
  };
  const J* a = nullptr;
  if (!Array(j, "k", &a, why)) return Line::kBad;
  if (a != nullptr)
    for (const J& e : *a) {
      if (r.kernels.size() >= StepLimits::kMaxKernels) break;
      KernelTime k;
      int64_t sig = 0, n = 0;
      if (!In("k",
              Tuple(e, "k", why) && IntValue(At(e, 0), "sig", 0, kMaxEntries, true, &sig, why) &&
                  IntValue(At(e, 1), "n", 0, kMaxU32, true, &n, why) && NumValue(At(e, 2), "s", true, &k.s, why) &&
                  NumValue(At(e, 3), "tflops", false, &k.tflops, why),
              why))
        return Line::kBad;
      k.n = static_cast<uint32_t>(n);
      k.s = seconds(k.s);
      if (const std::string* s = lookup(sigs_, sig, "kernel signature")) k.sig = *s;
      r.kernels.push_back(std::move(k));
    }
  if (!Array(j, "c", &a, why)) return Line::kBad;
  if (a != nullptr)
    for (const J& e : *a) {
      if (r.colls.size() >= StepLimits::kMaxColls) break;
      CollTime c;
      int64_t coll = 0, call = 0, start = 0, dur = 0;
      bool timed = e.is_array() && e.size() > 3;
      if (!In("c",
              Tuple(e, "c", why) && IntValue(At(e, 0), "coll", 0, kMaxEntries, true, &coll, why) &&
                  IntValue(At(e, 1), "seq", -kMaxI64, kMaxI64, true, &c.seq, why) &&
                  IntValue(At(e, 2), "call", -kMaxMicros, kMaxMicros, true, &call, why) &&
                  IntValue(At(e, 3), "start", -kMaxMicros, kMaxMicros, false, &start, why) &&
                  IntValue(At(e, 4), "end", -kMaxMicros, kMaxMicros, timed, &dur, why),
              why))
        return Line::kBad;
      c.call = seconds(static_cast<double>(begin + call));
      // Unknown GPU times leave NaN: CheckStepRecord drops that collective, not the record.
      c.start = timed ? seconds(static_cast<double>(begin + call + start)) : std::numeric_limits<double>::quiet_NaN();
      c.end = timed ? seconds(static_cast<double>(begin + call + start + dur)) : c.start;
      if (const Coll* d = lookup(colls_, coll, "collective")) {
        c.comm = d->comm;
        c.op = d->op;
        c.bytes = d->bytes;
        c.ranks = d->ranks;
      }
      r.colls.push_back(std::move(c));
    }
  if (!Array(j, "sm", &a, why)) return Line::kBad;
  if (a != nullptr)
    for (const J& e : *a) {
      if (r.samples.size() >= StepLimits::kMaxSamples) break;
      StackSample s;
      int64_t frames = 0, n = 0;
      if (!In("sm",
              Tuple(e, "sm", why) && IntValue(At(e, 0), "frames", 0, kMaxEntries, true, &frames, why) &&
                  IntValue(At(e, 1), "n", 1, kMaxU32, true, &n, why),
              why))
        return Line::kBad;
      s.n = static_cast<uint32_t>(n);
      if (const std::string* f = lookup(frames_, frames, "stack")) s.frames = *f;
      r.samples.push_back(std::move(s));
    }
  if (!unresolved.empty()) return *why = unresolved + kUnresolvedHint, Line::kUnresolved;
  if (!CheckStepRecord(&r, why)) return Line::kBad;
  *out = std::move(r);
  return Line::kRecord;
}

}  // namespace xtimer::slowdown
