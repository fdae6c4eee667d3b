// A small C library over the real CUDA runtime and NCCL API, for Python ranks (ctypes) in the
// hang checks: the Python process calls the simulated CUDA/NCCL libraries through it exactly as
// torch's extension calls the real ones.
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <simgpu/kernel.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace {
ncclComm_t g_comm = nullptr;
cudaStream_t g_stream = nullptr;
float* g_buf = nullptr;
size_t g_count = 0;
}  // namespace

extern "C" {

// A kernel that runs `ms` milliseconds on the GPU (a deadlocked custom kernel, a faulty GPU).
SIMGPU_KERNEL void pyccl_stuck_kernel(void** args) {
  simgpu_sleep_ns(static_cast<int64_t>(*static_cast<int*>(args[0])) * 1000000);
}
SIMGPU_KERNEL_PARAMS(pyccl_stuck_kernel, sizeof(int));

// Joins the communicator: rank 0 writes the unique id to `id_file`, the others wait for it.
__attribute__((visibility("default"))) int pyccl_init(int rank, int world, const char* id_file, int mib) {
  if (cudaSetDevice(0) != cudaSuccess) return 1;
  ncclUniqueId id;
  std::string path(id_file);
  if (rank == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess) return 2;
    std::ofstream(path + ".tmp", std::ios::binary).write(id.internal, sizeof id.internal);
    std::rename((path + ".tmp").c_str(), path.c_str());
  } else {
    bool ok = false;
    for (int i = 0; i < 3000 && !ok; ++i) {
      std::ifstream in(path, std::ios::binary);
      ok = static_cast<bool>(in.read(id.internal, sizeof id.internal));
      if (!ok) usleep(10000);
    }
    if (!ok) return 3;
  }
  if (ncclCommInitRank(&g_comm, world, id, rank) != ncclSuccess) return 4;
  if (cudaStreamCreate(&g_stream) != cudaSuccess) return 5;
  g_count = static_cast<size_t>(mib) << 20 >> 2;
  if (cudaMalloc(&g_buf, g_count * sizeof(float)) != cudaSuccess) return 6;
  return 0;
}

// Launches pyccl_stuck_kernel on the rank's stream and returns at once.
__attribute__((visibility("default"))) int pyccl_launch_kernel(int ms) {
  void* args[] = {&ms};
  return cudaLaunchKernel(reinterpret_cast<const void*>(pyccl_stuck_kernel), dim3(1), dim3(1), args, 0, g_stream) ==
                 cudaSuccess
             ? 0
             : 1;
}

// One allreduce, then waits for it on the host (as torch does when a tensor is read).
__attribute__((visibility("default"))) int pyccl_allreduce() {
  if (ncclAllReduce(g_buf, g_buf, g_count, ncclFloat32, ncclSum, g_comm, g_stream) != ncclSuccess) return 1;
  return cudaStreamSynchronize(g_stream) == cudaSuccess ? 0 : 2;
}

}  // extern "C"

// For the desync checks (tests/launcher/check_desync.py): collectives of a given kind and size,
// on the world communicator or on a sub-communicator made by pyccl_split. Each waits for its
// result on the host, as torch does when a tensor is read.
namespace {
ncclComm_t g_sub = nullptr;
float* g_recv = nullptr;
int g_world = 0;
}  // namespace

extern "C" {

// kind: 0 all-reduce of `count` floats, 1 all-gather of `count` floats per rank, 2 broadcast from
// rank 0; sub: 1 = on the sub-communicator.
__attribute__((visibility("default"))) int pyccl_collective(int kind, long count, int sub) {
  ncclComm_t comm = sub ? g_sub : g_comm;
  if (comm == nullptr || count <= 0 || size_t(count) > g_count) return 1;
  if (g_world == 0) ncclCommCount(g_comm, &g_world);
  if (g_recv == nullptr && cudaMalloc(&g_recv, g_count * sizeof(float) * size_t(g_world)) != cudaSuccess) return 2;
  ncclResult_t r = ncclSuccess;
  if (kind == 0) r = ncclAllReduce(g_buf, g_buf, size_t(count), ncclFloat32, ncclSum, comm, g_stream);
  else if (kind == 1) r = ncclAllGather(g_buf, g_recv, size_t(count), ncclFloat32, comm, g_stream);
  else r = ncclBroadcast(g_buf, g_buf, size_t(count), ncclFloat32, 0, comm, g_stream);
  if (r != ncclSuccess) return 3;
  return cudaStreamSynchronize(g_stream) == cudaSuccess ? 0 : 4;
}

// Splits the world communicator by `color` (a tensor-parallel group).
__attribute__((visibility("default"))) int pyccl_split(int color, int world) {
  g_world = world;
  return ncclCommSplit(g_comm, color, 0, &g_sub, nullptr) == ncclSuccess ? 0 : 1;
}

// Point-to-point with every other rank in one group (torch's all-to-all-v): rank r sends
// `unit` * (r + 1) floats to each peer.
__attribute__((visibility("default"))) int pyccl_exchange(int rank, int world, long unit) {
  if (g_recv == nullptr && cudaMalloc(&g_recv, g_count * sizeof(float) * size_t(world)) != cudaSuccess) return 2;
  ncclGroupStart();
  for (int p = 0; p < world; ++p) {
    if (p == rank) continue;
    ncclSend(g_buf, size_t(unit) * size_t(rank + 1), ncclFloat32, p, g_comm, g_stream);
    ncclRecv(g_recv + size_t(p) * size_t(unit) * size_t(world), size_t(unit) * size_t(p + 1), ncclFloat32, p, g_comm,
             g_stream);
  }
  if (ncclGroupEnd() != ncclSuccess) return 3;
  return cudaStreamSynchronize(g_stream) == cudaSuccess ? 0 : 4;
}

}  // extern "C"
