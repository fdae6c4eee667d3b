#include "common/steps/step_record.h"

#include <algorithm>
#include <cmath>

#include "common/utf8_text.h"

namespace xtimer::slowdown {
namespace {

// At most n bytes, each invalid UTF-8 byte and each control character as '?': the strings reach
// log lines, the status page and SVG text.
void Clean(std::string* s, size_t n) {
  CutUtf8(s, n);
  std::string out;
  out.reserve(s->size());
  for (size_t i = 0; i < s->size();) {
    size_t len = Utf8Length(*s, i);
    if (len == 0 || IsControlChar(*s, i, len)) {
      out += '?';
      i += len == 0 ? 1 : len;
    } else {
      out.append(*s, i, len);
      i += len;
    }
  }
  s->swap(out);
}

bool Duration(double v) { return std::isfinite(v) && v >= 0 && v <= StepLimits::kMaxStepSeconds; }
bool Time(double v) { return std::isfinite(v) && v >= 0 && v < 1e11; }

}  // namespace

bool CheckStepRecord(StepRecord* r, std::string* why) {
  if (r->world < 1 || r->world > StepLimits::kMaxWorld)
    return *why = "world " + std::to_string(r->world) + " is outside [1, 2^20]", false;
  if (r->rank < 0 || r->rank >= r->world)
    return *why = "rank " + std::to_string(r->rank) + " is outside [0, world " + std::to_string(r->world) + ")", false;
  if (!Time(r->t_begin) || !Time(r->t_end) || r->t_end < r->t_begin ||
      r->t_end - r->t_begin > StepLimits::kMaxStepSeconds)
    return *why = "t_begin/t_end are not two times (seconds) with t_begin <= t_end within a day", false;
  for (double* d : {&r->gpu_busy_s, &r->gpu_idle_s, &r->issue_latency_s, &r->gc_s, &r->data_s})
    if (!Duration(*d)) *d = 0;
  Clean(&r->node, StepLimits::kMaxNode);

  if (r->kernels.size() > StepLimits::kMaxKernels) r->kernels.resize(StepLimits::kMaxKernels);
  std::erase_if(r->kernels, [](KernelTime& k) {
    Clean(&k.sig, StepLimits::kMaxSig);
    if (!std::isfinite(k.tflops) || k.tflops < 0) k.tflops = 0;
    return k.sig.empty() || !Duration(k.s);
  });

  if (r->colls.size() > StepLimits::kMaxColls) r->colls.resize(StepLimits::kMaxColls);
  std::erase_if(r->colls, [](CollTime& c) {
    Clean(&c.comm, StepLimits::kMaxComm);
    Clean(&c.op, StepLimits::kMaxOp);
    if (!Time(c.call)) c.call = 0;
    return c.comm.empty() || c.ranks < 1 || c.ranks > StepLimits::kMaxWorld || !Time(c.start) || !Time(c.end) ||
           c.end < c.start || c.end - c.start > StepLimits::kMaxStepSeconds;
  });

  if (r->samples.size() > StepLimits::kMaxSamples) r->samples.resize(StepLimits::kMaxSamples);
  std::erase_if(r->samples, [](StackSample& s) {
    Clean(&s.frames, StepLimits::kMaxFrames);
    return s.frames.empty() || s.n == 0;
  });
  return true;
}

}  // namespace xtimer::slowdown
