#include "launcher/run/precheck.h"

#include <cublas_v2.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "common/net/net.h"
#include "netprobe/probe_gpu_api.h"
#include "common/net/subprocess.h"

namespace xtimer::run {
namespace {

using net::Deadline;
using netprobe::CudaRt;
using netprobe::Nccl;
using nlohmann::json;

constexpr const char* kMarker = "XTRUN-PRECHECK ";
constexpr int kMatmulN = 2048;  // fp32, 48 MiB of operands per GPU
constexpr int kMatmulIters = 20;
constexpr int64_t kAllReduceBytes = int64_t{16} << 20;
constexpr int kAllReduceIters = 5;

struct Cublas {
  decltype(&::cublasCreate_v2) Create = nullptr;
  decltype(&::cublasDestroy_v2) Destroy = nullptr;
  decltype(&::cublasSetStream_v2) SetStream = nullptr;
  decltype(&::cublasSgemm_v2) Sgemm = nullptr;
  decltype(&::cublasGetStatusString) StatusString = nullptr;
};

bool LoadCublas(Cublas* b, std::string* error) {
  void* h = nullptr;
  std::string tried;
  for (const char* name : {"libcublas.so.13", "libcublas.so.12"}) {
    if ((h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    const char* e = dlerror();
    tried += std::string(tried.empty() ? "" : "; ") + (e != nullptr ? e : name);
  }
  if (h == nullptr) return (*error = "cannot load " + tried), false;
  b->Create = reinterpret_cast<decltype(b->Create)>(dlsym(h, "cublasCreate_v2"));
  b->Destroy = reinterpret_cast<decltype(b->Destroy)>(dlsym(h, "cublasDestroy_v2"));
  b->SetStream = reinterpret_cast<decltype(b->SetStream)>(dlsym(h, "cublasSetStream_v2"));
  b->Sgemm = reinterpret_cast<decltype(b->Sgemm)>(dlsym(h, "cublasSgemm_v2"));
  b->StatusString = reinterpret_cast<decltype(b->StatusString)>(dlsym(h, "cublasGetStatusString"));
  if (!b->Create || !b->Destroy || !b->SetStream || !b->Sgemm || !b->StatusString)
    return (*error = "libcublas lacks cublasCreate_v2, cublasSgemm_v2 or cublasGetStatusString"), false;
  return true;
}

std::string Gpu(int d) { return "GPU " + std::to_string(d); }

// The GPU work. Every wait ends at `deadline`; a failure is {"ok": false, "error"}.
json Check(Deadline deadline) {
  CudaRt cu;
  std::string error;
  if (!netprobe::LoadCudaRt(&cu, &error)) return {{"ok", false}, {"no_cuda", true}, {"error", error}};
  auto fail = [](const std::string& e) { return json{{"ok", false}, {"error", e}}; };
  int n = 0;
  cudaError_t ce = cu.GetDeviceCount(&n);
  if (ce != cudaSuccess) return fail(std::string("cudaGetDeviceCount: ") + cu.GetErrorString(ce));
  if (n <= 0) return fail("no GPU visible (cudaGetDeviceCount gives 0)");
  const size_t bytes = size_t{kMatmulN} * kMatmulN * sizeof(float);
  std::vector<void*> a(n), b(n), c(n);
  std::vector<cudaStream_t> streams(n);
  for (int d = 0; d < n; ++d) {
    if ((ce = cu.SetDevice(d)) != cudaSuccess || (ce = cu.StreamCreate(&streams[d])) != cudaSuccess ||
        (ce = cu.Malloc(&a[d], bytes)) != cudaSuccess || (ce = cu.Malloc(&b[d], bytes)) != cudaSuccess ||
        (ce = cu.Malloc(&c[d], bytes)) != cudaSuccess || (ce = cu.Memset(a[d], 0, bytes)) != cudaSuccess ||
        (ce = cu.Memset(b[d], 0, bytes)) != cudaSuccess)
      return fail(Gpu(d) + ": " + cu.GetErrorString(ce));
  }
  json out = {{"ok", true}, {"gpus", json::array()}};

  // A matmul on each GPU, timed between events on its stream.
  Cublas bl;
  if (!LoadCublas(&bl, &error)) {
    out["matmul_skipped"] = error;
  } else {
    for (int d = 0; d < n; ++d) {
      cu.SetDevice(d);
      cublasHandle_t h = nullptr;
      cublasStatus_t st = bl.Create(&h);
      if (st == CUBLAS_STATUS_SUCCESS) st = bl.SetStream(h, streams[d]);
      if (st != CUBLAS_STATUS_SUCCESS) return fail(Gpu(d) + ": cublasCreate: " + bl.StatusString(st));
      const float one = 1, zero = 0;
      auto gemm = [&](std::string* e) {
        cublasStatus_t s =
            bl.Sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, kMatmulN, kMatmulN, kMatmulN, &one, static_cast<const float*>(a[d]),
                     kMatmulN, static_cast<const float*>(b[d]), kMatmulN, &zero, static_cast<float*>(c[d]), kMatmulN);
        if (s != CUBLAS_STATUS_SUCCESS) *e = bl.StatusString(s);
        return s == CUBLAS_STATUS_SUCCESS;
      };
      double warm = 0, t = 0;
      if (!netprobe::Timed(cu, streams[d], 1, deadline, "cublasSgemm", gemm, &warm, &error) ||
          !netprobe::Timed(cu, streams[d], kMatmulIters, deadline, "cublasSgemm", gemm, &t, &error))
        return fail(Gpu(d) + ": " + error);
      bl.Destroy(h);
      out["gpus"].push_back({{"gpu", d}, {"n", kMatmulN}, {"seconds", t}});
    }
  }

  // One allreduce over all of them: a communicator of n ranks in this process.
  Nccl nc;
  if (!netprobe::LoadNccl(&nc, &error)) {
    out["allreduce_skipped"] = error;
    return out;
  }
  auto nccl_error = [&](const char* what, ncclResult_t r) { return std::string(what) + ": " + nc.GetErrorString(r); };
  ncclUniqueId id{};
  ncclResult_t nr = nc.GetUniqueId(&id);
  if (nr != ncclSuccess) return fail(nccl_error("ncclGetUniqueId", nr));
  std::vector<ncclComm_t> comms(n);
  nc.GroupStart();
  for (int d = 0; d < n && nr == ncclSuccess; ++d) {
    cu.SetDevice(d);
    nr = nc.CommInitRank(&comms[d], n, id, d);
  }
  ncclResult_t end = nc.GroupEnd();
  if (nr != ncclSuccess || end != ncclSuccess)
    return fail(nccl_error("ncclCommInitRank", nr != ncclSuccess ? nr : end));
  const size_t count = static_cast<size_t>(kAllReduceBytes) / sizeof(float);
  auto all_reduce = [&](int iters, std::string* e) {
    for (int i = 0; i < iters; ++i) {
      nc.GroupStart();
      ncclResult_t r = ncclSuccess;
      for (int d = 0; d < n && r == ncclSuccess; ++d)
        r = nc.AllReduce(a[d], c[d], count, ncclFloat, ncclSum, comms[d], streams[d]);
      ncclResult_t g = nc.GroupEnd();
      if (r != ncclSuccess || g != ncclSuccess)
        return (*e = nccl_error("ncclAllReduce", r != ncclSuccess ? r : g)), false;
    }
    return true;
  };
  // Timed on GPU 0's stream: every rank's part of one allreduce ends together.
  cu.SetDevice(0);
  double t = 0;
  if (!all_reduce(1, &error) || !netprobe::Timed(
                                    cu, streams[0], 1, deadline, "ncclAllReduce",
                                    [&](std::string* e) { return all_reduce(kAllReduceIters, e); }, &t, &error))
    return fail(error);
  out["allreduce"] = {{"gpus", n}, {"bytes", kAllReduceBytes}, {"seconds", t / kAllReduceIters}};
  return out;
}

std::string Fmt(const char* fmt, double a, double b = 0, double c = 0) {
  char buf[160];
  std::snprintf(buf, sizeof buf, fmt, a, b, c);
  return buf;
}

}  // namespace

PrecheckResult ReadPrecheckAnswer(const json& j) {
  PrecheckResult r;
  if (!j.is_object() || !j.contains("ok") || !j["ok"].is_boolean())
    return (r.why = "the GPU check gave no verdict (" + j.dump().substr(0, 120) + ")"), r;
  std::string error = j.contains("error") && j["error"].is_string() ? j["error"].get<std::string>() : "";
  if (!j["ok"].get<bool>()) {
    if (j.value("no_cuda", false)) {
      r.passed = true;
      r.lines.push_back("no CUDA runtime on this node (" + error + "): nothing to check");
      return r;
    }
    r.why = error.empty() ? "the GPU check failed without saying why" : error;
    return r;
  }
  try {
    for (const json& g : j.at("gpus")) {
      double n = g.at("n").get<double>(), s = g.at("seconds").get<double>();
      if (!(s > 0)) return (r.why = "GPU " + g.at("gpu").dump() + ": the matmul took no time"), r;
      r.lines.push_back("GPU " + g.at("gpu").dump() +
                        Fmt(": %.0fx%.0f fp32 matmul at %.1f TFLOPS", n, n, 2 * n * n * n / s / 1e12));
    }
    if (j.contains("matmul_skipped")) r.lines.push_back("matmul skipped: " + j["matmul_skipped"].get<std::string>());
    if (j.contains("allreduce")) {
      const json& a = j["allreduce"];
      int gpus = a.at("gpus").get<int>();
      double bytes = a.at("bytes").get<double>(), s = a.at("seconds").get<double>();
      if (gpus < 2 || !(s > 0)) {
        r.lines.push_back("allreduce on 1 GPU: NCCL works (one GPU has no bandwidth to measure)");
      } else {
        double busbw = bytes / s * 2.0 * (gpus - 1) / gpus / 1e9;
        r.lines.push_back(
            Fmt("allreduce of %.0f MiB over %.0f GPUs: %.3f ms, bus bandwidth ", bytes / (1 << 20), gpus, s * 1e3) +
            Fmt("%.1f GB/s", busbw));
      }
    }
    if (j.contains("allreduce_skipped"))
      r.lines.push_back("allreduce skipped: " + j["allreduce_skipped"].get<std::string>());
  } catch (const json::exception& e) {
    r.lines.clear();
    return (r.why = std::string("the GPU check's answer is malformed: ") + e.what()), r;
  }
  r.passed = true;
  return r;
}

PrecheckResult RunPrecheck(double timeout_s) {
  PrecheckResult r;
  std::string exe = net::SelfExe(), error, line;
  net::Child child;
  char t[32];
  std::snprintf(t, sizeof t, "%g", timeout_s);
  if (exe.empty() || !child.Spawn({exe, "--internal-precheck", t}, &error)) {
    // Our own failure, not the GPUs': the node is not held back for it.
    r.passed = true;
    r.lines.push_back("the GPU check could not start (" + error + "): not checked");
    return r;
  }
  // The child stops its own waits at the deadline and says which; a few seconds more for that.
  Deadline deadline = Deadline::In(timeout_s + 5);
  if (!child.ReadMarkedLine(kMarker, &line, deadline, &error)) {
    bool late = deadline.passed();
    child.Kill();
    r.why = late ? "the GPU check did not finish within " + std::to_string(static_cast<int>(timeout_s)) +
                       " s (XTIMER_GPU_CHECK_TIMEOUT)"
                 : "the GPU check ended without an answer (" + error + ")";
    return r;
  }
  child.Wait(Deadline::In(5));
  return ReadPrecheckAnswer(json::parse(line, nullptr, false));
}

int PrecheckWorkerMain(int argc, char** argv) {
  double timeout_s = argc >= 3 ? std::atof(argv[2]) : 60;
  json answer = Check(Deadline::In(timeout_s > 0 ? timeout_s : 60));
  std::string out = kMarker + answer.dump() + "\n";
  std::fflush(stdout);  // whatever the libraries printed goes first
  (void)!write(STDOUT_FILENO, out.data(), out.size());
  // No clean-up: a GPU that hangs could hang it; the process' end frees everything.
  _exit(0);
}

}  // namespace xtimer::run
