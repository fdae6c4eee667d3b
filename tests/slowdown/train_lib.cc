// The GPU side of the slowdown scenarios' training step (train_rank.py calls it with ctypes, as
// torch's extension calls the real libraries): forward GEMMs and an element-wise kernel, an
// all-gather on the node's communicator (tensor parallel), backward GEMMs, the gradient
// all-reduce on the job's communicator (data parallel) and a loss all-reduce, an optimizer
// kernel, then a wait for the stream (the loss is read). It runs on the simulated runtime, where
// SIMGPU_CONTROL slows one rank's kernels (gpu_factor) or one node's network (net_gbps).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <simgpu/kernel.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

extern "C" SIMGPU_KERNEL void tl_elementwise(void** args) { simgpu_sleep_ns(*static_cast<int64_t*>(args[0])); }
SIMGPU_KERNEL_PARAMS(tl_elementwise, sizeof(int64_t));
extern "C" SIMGPU_KERNEL void tl_adam_step(void** args) { simgpu_sleep_ns(*static_cast<int64_t*>(args[0])); }
SIMGPU_KERNEL_PARAMS(tl_adam_step, sizeof(int64_t));

namespace {

ncclComm_t g_world = nullptr, g_node = nullptr;
cudaStream_t g_stream = nullptr;
cublasHandle_t g_blas = nullptr;
char* g_grads = nullptr;
char* g_act = nullptr;
float* g_loss = nullptr;
size_t g_grad_bytes = 0, g_act_bytes = 0;
int g_node_size = 1, g_node_rank = 0;
int g_gemm = 8192;

// Rank `writer` writes the unique id to `path`; the others wait for it.
int ShareId(bool writer, const std::string& path, ncclUniqueId* id) {
  if (writer) {
    if (ncclGetUniqueId(id) != ncclSuccess) return 1;
    std::ofstream(path + ".tmp", std::ios::binary).write(id->internal, sizeof id->internal);
    return std::rename((path + ".tmp").c_str(), path.c_str()) == 0 ? 0 : 1;
  }
  for (int i = 0; i < 12000; ++i) {  // 2 minutes: ranks start slowly on a loaded machine
    std::ifstream in(path, std::ios::binary);
    if (in.read(id->internal, sizeof id->internal)) return 0;
    usleep(10000);
  }
  return 1;
}

int Gemm(int m, int n, int k) {
  const float one = 1, zero = 0;
  return cublasGemmEx(g_blas, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, g_act, CUDA_R_16BF, m, g_act, CUDA_R_16BF, k,
                      &zero, g_act, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS
             ? 0
             : 1;
}

int Kernel(void* fn, int64_t ns) {
  void* args[] = {&ns};
  return cudaLaunchKernel(fn, dim3(1), dim3(1), args, 0, g_stream) == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" {

// Joins the job's communicator (`world` ranks) and the node's (`node_size` ranks from
// rank - rank % node_size); ids are exchanged through files in `id_dir`. `grad_mib` sizes the
// gradient all-reduce, `gemm` the GEMMs (gemm x gemm x 4096, bf16).
__attribute__((visibility("default"))) int tl_init(int rank, int world, int node_size, const char* id_dir, int grad_mib,
                                                   int gemm) {
  if (cudaSetDevice(0) != cudaSuccess) return 1;
  if (cudaStreamCreate(&g_stream) != cudaSuccess) return 2;
  if (cublasCreate(&g_blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(g_blas, g_stream) != CUBLAS_STATUS_SUCCESS)
    return 3;
  g_node_size = node_size;
  g_node_rank = rank % node_size;
  g_gemm = gemm;
  const std::string dir(id_dir);
  ncclUniqueId world_id, node_id;
  const int node = rank / node_size;
  if (ShareId(rank == 0, dir + "/world.id", &world_id) != 0) return 4;
  if (ShareId(rank % node_size == 0, dir + "/node" + std::to_string(node) + ".id", &node_id) != 0) return 5;
  if (ncclCommInitRank(&g_world, world, world_id, rank) != ncclSuccess) return 6;
  if (ncclCommInitRank(&g_node, node_size, node_id, rank % node_size) != ncclSuccess) return 7;
  g_grad_bytes = static_cast<size_t>(grad_mib) << 20;
  g_act_bytes = 1 << 20;
  if (cudaMalloc(&g_grads, g_grad_bytes) != cudaSuccess) return 8;
  if (cudaMalloc(&g_act, g_act_bytes * static_cast<size_t>(node_size)) != cudaSuccess) return 9;
  if (cudaMalloc(&g_loss, sizeof(float)) != cudaSuccess) return 10;
  return 0;
}

// One training step's GPU work, then a wait for it. `stop`: this rank wants to stop; the loss
// all-reduce carries it, so every rank learns it in the same step. Returns 1 when some rank
// wants to stop, 0 to go on, -1 on an error.
__attribute__((visibility("default"))) int tl_step(int stop) {
  int bad = 0;
  float flag = stop ? 1.0f : 0.0f;
  if (cudaMemcpyAsync(g_loss, &flag, sizeof flag, cudaMemcpyHostToDevice, g_stream) != cudaSuccess) bad |= 16;
  for (int i = 0; i < 4; ++i) bad |= Gemm(g_gemm, g_gemm, 4096);  // forward
  bad |= Kernel(reinterpret_cast<void*>(tl_elementwise), 8000000);
  char* mine = g_act + static_cast<size_t>(g_node_rank) * g_act_bytes;  // in place, as NCCL allows
  if (ncclAllGather(mine, g_act, g_act_bytes / 2, ncclBfloat16, g_node, g_stream) != ncclSuccess) bad |= 1;
  for (int i = 0; i < 8; ++i) bad |= Gemm(g_gemm, g_gemm, 4096);  // backward
  bad |= Kernel(reinterpret_cast<void*>(tl_elementwise), 8000000);
  if (ncclAllReduce(g_grads, g_grads, g_grad_bytes / 4, ncclFloat32, ncclSum, g_world, g_stream) != ncclSuccess)
    bad |= 2;
  if (ncclAllReduce(g_loss, g_loss, 1, ncclFloat32, ncclSum, g_world, g_stream) != ncclSuccess) bad |= 4;
  bad |= Kernel(reinterpret_cast<void*>(tl_adam_step), 5000000);
  if (cudaStreamSynchronize(g_stream) != cudaSuccess) bad |= 8;
  if (cudaMemcpy(&flag, g_loss, sizeof flag, cudaMemcpyDeviceToHost) != cudaSuccess) bad |= 32;
  if (bad != 0) {
    std::fprintf(stderr, "tl_step: failed (%d)\n", bad);
    return -1;
  }
  return flag > 0 ? 1 : 0;
}

}  // extern "C"
