#include "launcher/run/comm_perf.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "launcher/run/elastic_agent.h"
#include "common/net/net.h"
#include "netprobe/probe_gpu_api.h"
#include "common/net/subprocess.h"

namespace xtimer::run {
namespace {

using net::Deadline;
using net::Fd;

constexpr char kMagic[4] = {'X', 'T', 'P', 'F'};
// Sizes measured, and timed calls of each (after two untimed ones).
constexpr struct {
  int64_t bytes;
  int iters;
} kSizes[] = {{int64_t{1} << 20, 10}, {int64_t{8} << 20, 10}, {int64_t{64} << 20, 5}};

// rank -> rank 0: magic, rank, whether it is ready (its GPU and NCCL loaded).
struct Hello {
  char magic[4];
  uint32_t rank, ready;
};
// rank 0 -> rank: magic, whether to go on, NCCL's unique id.
struct Reply {
  char magic[4];
  uint32_t go;
  ncclUniqueId id;
};

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

int Fail(int rank, const std::string& why) {
  std::fprintf(stderr, "xtimer_run: --comm-perf-test: rank %d: %s\n", rank, why.c_str());
  std::fflush(stderr);
  _exit(1);
}

// Rank 0: collects every other rank's hello on `listener`, then tells each whether to go on
// (everyone ready) with the unique id. False with *why when the test is off.
bool Serve(int listener, int world, bool ready, const ncclUniqueId& id, Deadline deadline, std::string* why) {
  std::vector<Fd> peers;
  std::vector<bool> seen(world, false);
  std::string not_ready;
  while (static_cast<int>(peers.size()) < world - 1) {
    std::string error;
    Fd fd = net::Accept(listener, deadline, &error);
    if (!fd.valid()) {
      *why = "only " + std::to_string(peers.size() + 1) + " of " + std::to_string(world) + " ranks came: " + error;
      ready = false;
      break;
    }
    Hello h{};
    if (!net::RecvAll(fd.get(), &h, sizeof h, deadline, &error) || std::memcmp(h.magic, kMagic, 4) != 0 ||
        h.rank == 0 || h.rank >= static_cast<uint32_t>(world) || seen[h.rank])
      continue;  // not one of ours (or a repeat): dropped
    seen[h.rank] = true;
    if (!h.ready && not_ready.empty()) not_ready = "rank " + std::to_string(h.rank) + " could not use its GPU";
    peers.push_back(std::move(fd));
  }
  if (!not_ready.empty()) *why = not_ready, ready = false;
  Reply r{};
  std::memcpy(r.magic, kMagic, 4);
  r.go = ready ? 1 : 0;
  r.id = id;
  for (Fd& p : peers) {
    std::string ignored;
    net::SendAll(p.get(), &r, sizeof r, deadline, &ignored);
  }
  // Each peer closes first (after reading), so this side leaves nothing in TIME_WAIT on the port.
  for (Fd& p : peers) {
    char c;
    std::string ignored;
    net::RecvAll(p.get(), &c, 1, Deadline::Earlier(deadline, Deadline::In(2)), &ignored);
  }
  return ready;
}

}  // namespace

std::vector<WorkerSpec> CommPerfSpecs(const RunOptions& o, const Round& round, const std::vector<std::string>& base,
                                      double timeout_s) {
  std::vector<std::string> clean;
  for (const std::string& kv : base)
    if (kv.rfind("LD_PRELOAD=", 0) != 0 && kv.rfind("XTIMER_AGENT_SOCKET=", 0) != 0) clean.push_back(kv);
  char t[32];
  std::snprintf(t, sizeof t, "%g", timeout_s);
  std::vector<WorkerSpec> specs;
  for (int local = 0; local < o.nproc_per_node; ++local) {
    WorkerSpec s;
    s.argv = {net::SelfExe(), "--internal-comm-perf", t};
    s.env = WorkerEnvironment(o, round, local, clean);
    s.local_rank = local;
    s.rank = round.group_rank * o.nproc_per_node + local;
    specs.push_back(std::move(s));
  }
  return specs;
}

std::string FormatPerfTable(int rank, int world, int nodes, const std::vector<PerfRow>& rows) {
  char line[200];
  std::snprintf(line, sizeof line,
                "comm perf test: allreduce (float32, sum) over %d rank(s) on %d node(s), timed on rank %d\n", world,
                nodes, rank);
  std::string out = line;
  std::snprintf(line, sizeof line, "%12s %12s %12s %12s\n", "size", "time", "algbw", "busbw");
  out += line;
  for (const PerfRow& r : rows) {
    double algbw = r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / 1e9 : 0;
    double busbw = world > 0 ? algbw * 2.0 * (world - 1) / world : 0;
    char size[32], time[32], a[32], b[32];
    std::snprintf(size, sizeof size, "%lld MiB", static_cast<long long>(r.bytes >> 20));
    std::snprintf(time, sizeof time, "%.3f ms", r.seconds * 1e3);
    std::snprintf(a, sizeof a, "%.2f GB/s", algbw);
    std::snprintf(b, sizeof b, "%.2f GB/s", busbw);
    std::snprintf(line, sizeof line, "%12s %12s %12s %12s\n", size, time, a, b);
    out += line;
  }
  return out;
}

int CommPerfWorkerMain(int argc, char** argv) {
  const double timeout_s = argc >= 3 && std::atof(argv[2]) > 0 ? std::atof(argv[2]) : 60;
  const Deadline deadline = Deadline::In(timeout_s);
  const int rank = EnvInt("RANK", 0), world = EnvInt("WORLD_SIZE", 1), local = EnvInt("LOCAL_RANK", 0);
  const int nodes = EnvInt("GROUP_WORLD_SIZE", 1), port = EnvInt("MASTER_PORT", 0);
  const char* master = std::getenv("MASTER_ADDR");
  if (world < 1 || rank < 0 || rank >= world || port <= 0 || master == nullptr)
    return Fail(rank, "no torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)");
  std::string error;
  // Rank 0 listens before anything else, so that the others find it as early as they can.
  Fd listener;
  if (rank == 0) {
    int p = port;
    listener = net::Listen("", &p, &error);
    if (!listener.valid()) return Fail(rank, "cannot listen on MASTER_PORT " + std::to_string(port) + ": " + error);
  }
  netprobe::CudaRt cu;
  netprobe::Nccl nc;
  int devices = 0;
  std::string unready;
  if (!netprobe::LoadCudaRt(&cu, &error) || !netprobe::LoadNccl(&nc, &error)) {
    unready = error;
  } else if (cudaError_t e = cu.GetDeviceCount(&devices); e != cudaSuccess || devices <= 0) {
    unready = e != cudaSuccess ? std::string("cudaGetDeviceCount: ") + cu.GetErrorString(e) : "no GPU visible";
  } else if ((e = cu.SetDevice(local % devices)) != cudaSuccess) {
    unready = "cudaSetDevice(" + std::to_string(local % devices) + "): " + cu.GetErrorString(e);
  }
  ncclUniqueId id{};
  if (rank == 0) {
    if (unready.empty())
      if (ncclResult_t r = nc.GetUniqueId(&id); r != ncclSuccess)
        unready = std::string("ncclGetUniqueId: ") + nc.GetErrorString(r);
    std::string why;
    if (!Serve(listener.get(), world, unready.empty(), id, deadline, &why))
      return Fail(rank, unready.empty() ? why : unready);
    listener.reset();
  } else {
    Fd fd = net::Connect(master, port, deadline, &error);
    if (!fd.valid()) return Fail(rank, unready.empty() ? "cannot reach rank 0: " + error : unready);
    Hello h{};
    std::memcpy(h.magic, kMagic, 4);
    h.rank = static_cast<uint32_t>(rank);
    h.ready = unready.empty() ? 1 : 0;
    Reply r{};
    if (!net::SendAll(fd.get(), &h, sizeof h, deadline, &error) ||
        !net::RecvAll(fd.get(), &r, sizeof r, deadline, &error) || std::memcmp(r.magic, kMagic, 4) != 0)
      return Fail(rank, unready.empty() ? "no answer from rank 0: " + error : unready);
    fd.reset();
    if (!unready.empty()) return Fail(rank, unready);
    if (!r.go) return Fail(rank, "rank 0 called the test off (another rank could not take part)");
    id = r.id;
  }
  if (!unready.empty()) return Fail(rank, unready);

  ncclComm_t comm = nullptr;
  if (ncclResult_t r = nc.CommInitRank(&comm, world, id, rank); r != ncclSuccess)
    return Fail(rank, std::string("ncclCommInitRank: ") + nc.GetErrorString(r));
  const int64_t most = kSizes[std::size(kSizes) - 1].bytes;
  void *a = nullptr, *b = nullptr;
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cu.StreamCreate(&stream); e != cudaSuccess || (e = cu.Malloc(&a, most)) != cudaSuccess ||
                                                (e = cu.Malloc(&b, most)) != cudaSuccess ||
                                                (e = cu.Memset(a, 0, most)) != cudaSuccess)
    return Fail(rank, std::string("allocating ") + std::to_string(most >> 20) + " MiB: " + cu.GetErrorString(e));
  std::vector<PerfRow> rows;
  for (const auto& size : kSizes) {
    const size_t count = static_cast<size_t>(size.bytes) / sizeof(float);
    auto op = [&](std::string* e) {
      ncclResult_t r = nc.AllReduce(a, b, count, ncclFloat, ncclSum, comm, stream);
      if (r != ncclSuccess) *e = nc.GetErrorString(r);
      return r == ncclSuccess;
    };
    double warm = 0, t = 0;
    if (!netprobe::Timed(cu, stream, 2, deadline, "ncclAllReduce", op, &warm, &error) ||
        !netprobe::Timed(cu, stream, size.iters, deadline, "ncclAllReduce", op, &t, &error))
      return Fail(rank, error);
    rows.push_back({size.bytes, t});
  }
  if (local == 0) {
    std::string table = FormatPerfTable(rank, world, nodes, rows);
    std::fputs(table.c_str(), stdout);
  }
  std::fflush(stdout);
  // No clean-up: a peer that hangs could hang it; the process' end frees everything.
  _exit(0);
}

}  // namespace xtimer::run
