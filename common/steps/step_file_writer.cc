#include "common/steps/step_file_writer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "common/json_writer.h"
#include "common/utf8_text.h"

namespace xtimer::slowdown {
namespace {

// A time in whole microseconds, rounded as layout 1's 6 decimals round it (the whole seconds apart,
// so that the product does not round first); 0 for a non-finite one (a reader refuses it anyway).
int64_t Micros(double seconds) {
  if (!std::isfinite(seconds) || std::fabs(seconds) > 9e12) return 0;
  const double whole = std::floor(seconds);
  return static_cast<int64_t>(whole) * 1000000 + std::llround((seconds - whole) * 1e6);
}

// A duration in microseconds with at least the precision of layout 1 (6 significant digits of
// the seconds): whole microseconds from 100 ms up, else 6 significant digits.
void Duration(JsonWriter& w, double seconds) {
  const double us = seconds * 1e6;
  if (!std::isfinite(us)) return void(w.Int(0));
  if (std::fabs(us) >= 1e5) return void(w.Int(Micros(seconds)));
  w.Double(us);
}

bool Known(double v) { return std::isfinite(v); }

// A string as JSON text, each byte that is not valid UTF-8 as '?' (a reader refuses invalid UTF-8
// as a whole line; it cleans control characters itself).
void Text(JsonWriter& w, std::string_view s) {
  size_t i = 0;
  while (i < s.size() && Utf8Length(s, i) > 0) i += Utf8Length(s, i);
  if (i == s.size()) return void(w.String(s));
  std::string valid(s.substr(0, i));
  while (i < s.size()) {
    const size_t n = Utf8Length(s, i);
    valid.append(n == 0 ? std::string_view("?") : s.substr(i, n));
    i += n == 0 ? 1 : n;
  }
  w.String(valid);
}

}  // namespace

std::string StepRecordV1Json(const StepRecord& r) {
  JsonWriter w;
  w.BeginObject().Field("v", 1).Field("rank", r.rank).Field("world", r.world).Key("node");
  Text(w, r.node);
  w.Field("pid", r.pid).Field("step", r.step);
  w.Key("t_begin").Fixed(r.t_begin, 6).Key("t_end").Fixed(r.t_end, 6);
  w.Field("gpu_busy_s", r.gpu_busy_s).Field("gpu_idle_s", r.gpu_idle_s).Field("issue_latency_s", r.issue_latency_s);
  w.Key("kernels").BeginArray();
  for (const KernelTime& k : r.kernels) {
    w.BeginObject().Key("sig");
    Text(w, k.sig);
    w.Field("n", k.n).Field("s", k.s).Field("tflops", k.tflops).EndObject();
  }
  w.EndArray().Key("colls").BeginArray();
  for (const CollTime& c : r.colls) {
    w.BeginObject().Key("comm");
    Text(w, c.comm);
    w.Field("seq", c.seq).Key("op");
    Text(w, c.op);
    w.Field("bytes", c.bytes);
    w.Field("ranks", c.ranks).Key("call").Fixed(c.call, 6).Key("start").Fixed(c.start, 6);
    w.Key("end").Fixed(c.end, 6).EndObject();
  }
  w.EndArray().Field("gc_s", r.gc_s).Field("data_s", r.data_s);
  if (!r.samples.empty()) {
    w.Key("samples").BeginArray();
    for (const StackSample& s : r.samples) {
      w.BeginObject().Key("frames");
      Text(w, s.frames);
      w.Field("n", s.n).EndObject();
    }
    w.EndArray();
  }
  return w.EndObject().Take();
}

void StepFileWriter::Reset() { started_ = false; }

void StepFileWriter::Header(const StepRecord& r, std::string* out) {
  started_ = true;
  rank_ = r.rank;
  world_ = r.world;
  node_ = r.node;
  pid_ = r.pid;
  t0_s_ = Known(r.t_begin) ? static_cast<int64_t>(std::floor(r.t_begin)) : 0;
  sigs_ = colls_ = frames_ = Table();
  JsonWriter w;
  w.BeginObject().Field("v", 2).Field("rank", r.rank).Field("world", r.world).Key("node");
  Text(w, r.node);
  w.Field("pid", r.pid).Field("t0", t0_s_).EndObject();
  *out += w.Take();
  *out += '\n';
}

void StepFileWriter::Append(const StepRecord& r, std::string* out) {
  auto full = [](const Table& t) { return t.size() >= kMaxEntries || t.bytes >= kMaxBytes; };
  if (!started_ || r.rank != rank_ || r.world != world_ || r.node != node_ || r.pid != pid_ || full(sigs_) ||
      full(colls_) || full(frames_))
    Header(r, out);

  // The index of each string and collective the step uses; new ones gathered for the dictionary.
  std::vector<const std::string*> new_sigs, new_frames;
  std::vector<const CollKey*> new_colls;
  const size_t sig_base = sigs_.size(), coll_base = colls_.size(), frame_base = frames_.size();
  auto index = [](Table& t, const std::string& s, std::vector<const std::string*>* added) {
    auto [it, inserted] = t.strings.try_emplace(s, static_cast<uint32_t>(t.strings.size()));
    if (inserted) {
      added->push_back(&it->first);
      t.bytes += s.size();
    }
    return it->second;
  };
  std::vector<uint32_t> kernel_ix, coll_ix, frame_ix;
  for (const KernelTime& k : r.kernels) kernel_ix.push_back(index(sigs_, k.sig, &new_sigs));
  for (const CollTime& c : r.colls) {
    if (c.comm.empty()) {
      coll_ix.push_back(UINT32_MAX);
      continue;
    }
    auto [it, inserted] =
        colls_.colls.try_emplace(CollKey(c.comm, c.op, c.bytes, c.ranks), static_cast<uint32_t>(colls_.colls.size()));
    if (inserted) {
      new_colls.push_back(&it->first);
      colls_.bytes += c.comm.size() + c.op.size();
    }
    coll_ix.push_back(it->second);
  }
  for (const StackSample& s : r.samples) frame_ix.push_back(index(frames_, s.frames, &new_frames));

  auto dictionary = [&](const char* table, size_t base, auto& added, auto write) {
    if (added.empty()) return;
    JsonWriter w;
    w.BeginObject().Field("d", table).Field("i", static_cast<uint64_t>(base)).Key("add").BeginArray();
    for (const auto* e : added) write(w, *e);
    *out += w.EndArray().EndObject().Take();
    *out += '\n';
  };
  auto string = [](JsonWriter& w, const std::string& s) { Text(w, s); };
  dictionary("sig", sig_base, new_sigs, string);
  dictionary("coll", coll_base, new_colls, [](JsonWriter& w, const CollKey& k) {
    w.BeginArray();
    Text(w, std::get<0>(k));
    Text(w, std::get<1>(k));
    w.Uint(std::get<2>(k)).Int(std::get<3>(k)).EndArray();
  });
  dictionary("frames", frame_base, new_frames, string);

  const int64_t begin = Micros(r.t_begin), end = Micros(r.t_end);
  JsonWriter w;
  w.BeginObject().Field("step", r.step).Field("t", begin - t0_s_ * 1000000).Field("len", end - begin);
  w.Key("busy");
  Duration(w, r.gpu_busy_s);
  // The idle time only where it is not the step's length less the busy time (as a rank writes it).
  const double idle = std::max(0.0, (static_cast<double>(end - begin) - r.gpu_busy_s * 1e6)) / 1e6;
  if (!(std::fabs(idle - r.gpu_idle_s) < 5e-7)) {
    w.Key("idle");
    Duration(w, r.gpu_idle_s);
  }
  if (Known(r.issue_latency_s)) {
    w.Key("lat");
    Duration(w, r.issue_latency_s);
  }
  if (!r.kernels.empty()) {
    w.Key("k").BeginArray();
    for (size_t i = 0; i < r.kernels.size(); ++i) {
      const KernelTime& k = r.kernels[i];
      w.BeginArray().Uint(kernel_ix[i]).Uint(k.n);
      Duration(w, k.s);
      if (k.tflops != 0) w.Double(k.tflops);
      w.EndArray();
    }
    w.EndArray();
  }
  bool any_coll = false;
  for (size_t i = 0; i < r.colls.size(); ++i) {
    const CollTime& c = r.colls[i];
    if (coll_ix[i] == UINT32_MAX) continue;
    if (!any_coll) {
      w.Key("c").BeginArray();
      any_coll = true;
    }
    // [collective, seq, call, start - call, end - start]; without the last two when unknown.
    const int64_t call = Micros(c.call), start = Micros(c.start);
    w.BeginArray().Uint(coll_ix[i]).Int(c.seq).Int(call - begin);
    if (Known(c.start) && Known(c.end)) w.Int(start - call).Int(Micros(c.end) - start);
    w.EndArray();
  }
  if (any_coll) w.EndArray();
  if (r.gc_s != 0) {
    w.Key("gc");
    Duration(w, r.gc_s);
  }
  if (r.data_s != 0) {
    w.Key("dl");
    Duration(w, r.data_s);
  }
  if (!r.samples.empty()) {
    w.Key("sm").BeginArray();
    for (size_t i = 0; i < r.samples.size(); ++i) w.BeginArray().Uint(frame_ix[i]).Uint(r.samples[i].n).EndArray();
    w.EndArray();
  }
  *out += w.EndObject().Take();
  *out += '\n';
}

}  // namespace xtimer::slowdown
