#include "netprobe/gpu_probe.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include <nlohmann/json.hpp>

#include "netprobe/probe_gpu_api.h"
#include "common/net/subprocess.h"
#include "netprobe/wire.h"

namespace xtimer::netprobe {
namespace {

using nlohmann::json;

constexpr const char* kMarker = "XTNP-WORKER ";

void Answer(const json& j) {
  std::string line = kMarker + j.dump() + "\n";
  fflush(stdout);  // whatever the libraries printed goes first
  ssize_t ignored = write(STDOUT_FILENO, line.data(), line.size());
  (void)ignored;
}

int Fail(const std::string& error) {
  Answer({{"ok", false}, {"error", error}});
  return 0;
}

int NcclWorker(int rank, int64_t size, double timeout_s, const std::string& uid_hex) {
  net::Deadline deadline = net::Deadline::In(timeout_s);
  CudaRt cu;
  Nccl nc;
  std::string error;
  if (!LoadCudaRt(&cu, &error) || !LoadNccl(&nc, &error)) return Fail(error);
  cudaError_t ce = cu.SetDevice(0);
  if (ce != cudaSuccess) return Fail(std::string("cudaSetDevice(0): ") + cu.GetErrorString(ce));

  ncclUniqueId id{};
  ncclResult_t nr;
  if (rank == 0) {
    if ((nr = nc.GetUniqueId(&id)) != ncclSuccess)
      return Fail(std::string("ncclGetUniqueId: ") + nc.GetErrorString(nr));
    Answer({{"uid", HexEncode(&id, sizeof id)}});
  } else if (!HexDecode(uid_hex, &id, sizeof id)) {
    return Fail("the NCCL unique id from the rendezvous is malformed");
  }
  ncclComm_t comm = nullptr;
  if ((nr = nc.CommInitRank(&comm, 2, id, rank)) != ncclSuccess)
    return Fail(std::string("ncclCommInitRank: ") + nc.GetErrorString(nr));

  cudaStream_t stream = nullptr;
  void* a = nullptr;
  void* b = nullptr;
  if ((ce = cu.StreamCreate(&stream)) != cudaSuccess || (ce = cu.Malloc(&a, size)) != cudaSuccess ||
      (ce = cu.Malloc(&b, size)) != cudaSuccess || (ce = cu.Memset(a, 0, size)) != cudaSuccess)
    return Fail(std::string("allocating ") + std::to_string(size) + " bytes on GPU 0: " + cu.GetErrorString(ce));
  const size_t count = static_cast<size_t>(size) / sizeof(float);
  auto nccl_ok = [&](ncclResult_t r, std::string* e) {
    if (r == ncclSuccess) return true;
    *e = nc.GetErrorString(r);
    return false;
  };
  auto small = [&](std::string* e) { return nccl_ok(nc.AllReduce(a, b, 1, ncclFloat, ncclSum, comm, stream), e); };
  auto big = [&](std::string* e) { return nccl_ok(nc.AllReduce(a, b, count, ncclFloat, ncclSum, comm, stream), e); };
  auto p2p = [&](int from) {
    return [&, from](std::string* e) {
      return rank == from ? nccl_ok(nc.Send(a, count, ncclFloat, 1 - rank, comm, stream), e)
                          : nccl_ok(nc.Recv(b, count, ncclFloat, 1 - rank, comm, stream), e);
    };
  };
  double lat = 0, ar = 0, fwd = 0, bwd = 0, warm = 0;
  if (!Timed(cu, stream, 1, deadline, "ncclAllReduce", small, &warm, &error) ||
      !Timed(cu, stream, 20, deadline, "ncclAllReduce (4 bytes)", small, &lat, &error) ||
      !Timed(cu, stream, 1, deadline, "ncclAllReduce", big, &warm, &error) ||
      !Timed(cu, stream, 5, deadline, "ncclAllReduce", big, &ar, &error) ||
      !Timed(cu, stream, 1, deadline, "ncclSend/ncclRecv", p2p(0), &warm, &error) ||
      !Timed(cu, stream, 5, deadline, "ncclSend/ncclRecv 0->1", p2p(0), &fwd, &error) ||
      !Timed(cu, stream, 5, deadline, "ncclSend/ncclRecv 1->0", p2p(1), &bwd, &error))
    return Fail(error);
  Answer({{"ok", true}, {"latency_us", lat * 1e6}, {"allreduce_s", ar}, {"fwd_s", fwd}, {"bwd_s", bwd}});
  nc.CommDestroy(comm);
  cu.Free(a);
  cu.Free(b);
  cu.StreamDestroy(stream);
  return 0;
}

int LocalWorker(int64_t size, double timeout_s) {
  net::Deadline deadline = net::Deadline::In(timeout_s);
  CudaRt cu;
  std::string error;
  if (!LoadCudaRt(&cu, &error)) return Fail(error);
  int n = 0;
  cudaError_t ce = cu.GetDeviceCount(&n);
  if (ce != cudaSuccess) return Fail(std::string("cudaGetDeviceCount: ") + cu.GetErrorString(ce));
  if (n <= 0) return Fail("no GPU visible");
  std::vector<void*> buf(n, nullptr);
  std::vector<cudaStream_t> streams(n, nullptr);
  json gpus = json::array(), pairs = json::array();
  void* host = nullptr;
  for (int d = 0; d < n; ++d) {
    if ((ce = cu.SetDevice(d)) != cudaSuccess || (ce = cu.StreamCreate(&streams[d])) != cudaSuccess ||
        (ce = cu.Malloc(&buf[d], size)) != cudaSuccess)
      return Fail("GPU " + std::to_string(d) + ": " + cu.GetErrorString(ce));
  }
  if (cu.MallocHost(&host, size) != cudaSuccess) {
    cu.GetLastError();
    host = nullptr;  // no pinned memory: skip the host-to-device figure
  }
  for (int d = 0; d < n && host != nullptr; ++d) {
    cu.SetDevice(d);
    auto h2d = [&](std::string* e) {
      cudaError_t r = cu.MemcpyAsync(buf[d], host, size, cudaMemcpyHostToDevice, streams[d]);
      if (r != cudaSuccess) *e = cu.GetErrorString(r);
      return r == cudaSuccess;
    };
    double warm = 0, t = 0;
    if (!Timed(cu, streams[d], 1, deadline, "cudaMemcpyAsync", h2d, &warm, &error) ||
        !Timed(cu, streams[d], 3, deadline, "cudaMemcpyAsync host->GPU", h2d, &t, &error))
      return Fail("GPU " + std::to_string(d) + ": " + error);
    gpus.push_back({{"gpu", d}, {"h2d_mbps", static_cast<double>(size) / t / 1e6}});
  }
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      int can = 0;
      cu.DeviceCanAccessPeer(&can, i, j);
      cu.SetDevice(i);
      if (can) {
        cudaError_t r = cu.DeviceEnablePeerAccess(j, 0);
        if (r != cudaSuccess) cu.GetLastError();  // already enabled is fine
      }
      auto copy = [&](std::string* e) {
        cudaError_t r = cu.MemcpyPeerAsync(buf[j], j, buf[i], i, size, streams[i]);
        if (r != cudaSuccess) *e = cu.GetErrorString(r);
        return r == cudaSuccess;
      };
      double warm = 0, t = 0;
      std::string what = "cudaMemcpyPeerAsync GPU " + std::to_string(i) + " -> GPU " + std::to_string(j);
      if (!Timed(cu, streams[i], 1, deadline, what.c_str(), copy, &warm, &error) ||
          !Timed(cu, streams[i], 3, deadline, what.c_str(), copy, &t, &error))
        return Fail(error);
      pairs.push_back(
          {{"src", i}, {"dst", j}, {"mbps", static_cast<double>(size) / t / 1e6}, {"peer_access", can != 0}});
    }
  }
  Answer({{"ok", true}, {"gpus", gpus}, {"pairs", pairs}});
  if (host != nullptr) cu.FreeHost(host);
  for (int d = 0; d < n; ++d) {
    cu.SetDevice(d);
    cu.Free(buf[d]);
    cu.StreamDestroy(streams[d]);
  }
  return 0;
}

bool StartWorker(const std::vector<std::string>& args, net::Child* child, std::string* error) {
  std::vector<std::string> argv = {net::SelfExe(), "--internal-worker"};
  argv.insert(argv.end(), args.begin(), args.end());
  if (argv[0].empty()) {
    *error = "cannot find the path of xtimer_netprobe to start its GPU worker";
    return false;
  }
  return child->Spawn(argv, error);
}

// Reads the worker's next answer as a JSON object with "ok" (or "uid" when expect_uid).
bool ReadAnswer(net::Child* child, net::Deadline deadline, json* out, std::string* error) {
  std::string line;
  if (!child->ReadMarkedLine(kMarker, &line, deadline, error)) return false;
  json j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    *error = "the GPU worker answered something unreadable";
    return false;
  }
  *out = std::move(j);
  return true;
}

// ok:false answers become errors.
bool CheckOk(const json& j, std::string* error) {
  json copy = j;
  copy["type"] = "worker";
  Fields f(copy, error);
  bool ok = false;
  if (!f.Bool("ok", &ok)) return false;
  if (!ok) {
    std::string e;
    *error = f.Str("error", &e, 4096) ? e : "the GPU worker failed without saying why";
    return false;
  }
  return true;
}

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s > 0 ? s : 0.001);
  return buf;
}

}  // namespace

std::string HexEncode(const void* data, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  const auto* p = static_cast<const unsigned char*>(data);
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += kDigits[p[i] >> 4];
    s += kDigits[p[i] & 15];
  }
  return s;
}

bool HexDecode(const std::string& hex, void* out, size_t n) {
  if (hex.size() != 2 * n) return false;
  auto* p = static_cast<unsigned char*>(out);
  auto val = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < n; ++i) {
    int hi = val(hex[2 * i]), lo = val(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    p[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return true;
}

double AllReduceBusBandwidth(double bytes, double seconds, int nranks) {
  if (seconds <= 0 || nranks <= 0) return 0;
  return bytes / seconds / 1e6 * 2.0 * (nranks - 1) / nranks;
}

int RunGpuWorker(const std::vector<std::string>& args) {
  auto num = [&](size_t i, double* out) {
    if (i >= args.size()) return false;
    char* end = nullptr;
    *out = std::strtod(args[i].c_str(), &end);
    return end != args[i].c_str() && *end == '\0';
  };
  double rank = 0, size = 0, timeout = 0;
  if (!args.empty() && args[0] == "nccl" && num(1, &rank) && num(2, &size) && num(3, &timeout) &&
      (rank == 0 || rank == 1) && size >= 4) {
    return NcclWorker(static_cast<int>(rank), static_cast<int64_t>(size), timeout, args.size() > 4 ? args[4] : "");
  }
  if (!args.empty() && args[0] == "local" && num(1, &size) && num(2, &timeout) && size >= 1)
    return LocalWorker(static_cast<int64_t>(size), timeout);
  std::fprintf(stderr, "xtimer_netprobe: --internal-worker is for xtimer_netprobe's own use\n");
  return 2;
}

void RunNcclInitiator(int64_t size, const std::function<bool(const std::string&, std::string*)>& send_uid,
                      net::Deadline deadline, TestResult* out) {
  out->completed = false;
  net::Child child;
  std::string error;
  json j;
  if (!StartWorker({"nccl", "0", std::to_string(size), Seconds(deadline.left_s())}, &child, &error) ||
      !ReadAnswer(&child, deadline, &j, &error)) {
    out->error = "GPU worker: " + error;
    return;
  }
  if (!j.contains("uid")) {
    out->error = CheckOk(j, &error) ? "the GPU worker sent no NCCL unique id" : error;
    return;
  }
  std::string uid;
  json copy = j;
  copy["type"] = "worker";
  if (!Fields(copy, &error).Str("uid", &uid, 1024) || !send_uid(uid, &error)) {
    out->error = error;
    return;
  }
  if (!ReadAnswer(&child, deadline, &j, &error) || !CheckOk(j, &error)) {
    out->error = error;
    return;
  }
  j["type"] = "worker";
  Fields f(j, &error);
  double lat, ar, fwd, bwd;
  if (!f.Num("latency_us", &lat) || !f.Num("allreduce_s", &ar) || !f.Num("fwd_s", &fwd) || !f.Num("bwd_s", &bwd) ||
      ar <= 0 || fwd <= 0 || bwd <= 0) {
    out->error = error.empty() ? "the GPU worker reported zero times" : error;
    return;
  }
  child.Wait(net::Deadline::Earlier(deadline, net::Deadline::In(5)));
  const double bytes = static_cast<double>(size);
  out->latency_us = lat;
  out->fwd_mbps = bytes / fwd / 1e6;
  out->bwd_mbps = bytes / bwd / 1e6;
  out->time_s = ar + fwd + bwd;
  out->extra = {{"allreduce_algbw_mbps", bytes / ar / 1e6},
                {"allreduce_busbw_mbps", AllReduceBusBandwidth(bytes, ar, 2)},
                {"allreduce_time_us", ar * 1e6},
                {"sendrecv_fwd_busbw_mbps", out->fwd_mbps},
                {"sendrecv_bwd_busbw_mbps", out->bwd_mbps}};
  out->completed = true;
}

bool RunNcclResponder(int64_t size, const std::string& uid_hex, net::Deadline deadline, std::string* error) {
  net::Child child;
  json j;
  if (!StartWorker({"nccl", "1", std::to_string(size), Seconds(deadline.left_s()), uid_hex}, &child, error) ||
      !ReadAnswer(&child, deadline, &j, error)) {
    *error = "GPU worker: " + *error;
    return false;
  }
  if (!CheckOk(j, error)) return false;
  child.Wait(net::Deadline::Earlier(deadline, net::Deadline::In(5)));
  return true;
}

LocalResult RunLocalGpuCheck(int64_t size, net::Deadline deadline) {
  LocalResult r;
  r.ran = true;
  net::Child child;
  std::string error;
  json j;
  if (!StartWorker({"local", std::to_string(size), Seconds(deadline.left_s())}, &child, &error) ||
      !ReadAnswer(&child, deadline, &j, &error) || !CheckOk(j, &error)) {
    r.error = error;
    return r;
  }
  child.Wait(net::Deadline::Earlier(deadline, net::Deadline::In(5)));
  auto gpus = j.find("gpus");
  auto pairs = j.find("pairs");
  if (gpus == j.end() || !gpus->is_array() || pairs == j.end() || !pairs->is_array()) {
    r.error = "the GPU worker's answer lacks gpus/pairs";
    return r;
  }
  for (const json& g : *gpus) {
    if (g.is_object() && g.contains("gpu") && g["gpu"].is_number_integer() && g.contains("h2d_mbps") &&
        g["h2d_mbps"].is_number())
      r.h2d_mbps.push_back({g["gpu"].get<int>(), g["h2d_mbps"].get<double>()});
  }
  for (const json& p : *pairs) {
    if (!p.is_object() || !p.contains("src") || !p.contains("dst") || !p.contains("mbps") ||
        !p["src"].is_number_integer() || !p["dst"].is_number_integer() || !p["mbps"].is_number())
      continue;
    LocalResult::Pair lp;
    lp.src = p["src"].get<int>();
    lp.dst = p["dst"].get<int>();
    lp.mbps = p["mbps"].get<double>();
    lp.peer_access = p.contains("peer_access") && p["peer_access"].is_boolean() && p["peer_access"].get<bool>();
    r.pairs.push_back(lp);
  }
  r.ok = true;
  return r;
}

}  // namespace xtimer::netprobe
