// Host time of one collective call on the simulated runtime: a one-rank communicator
// all-reduces one float `--calls` times (a stream sync every 64 calls, not timed). Prints
// {"ns_per_call": N}. desync_bench.py runs it with and without the fingerprints.
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {
int64_t Now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}
}  // namespace

int main(int argc, char** argv) {
  long calls = 200000;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--calls") == 0) calls = std::atol(argv[i + 1]);
  ncclUniqueId id;
  ncclComm_t comm;
  cudaStream_t stream;
  float* buf = nullptr;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess ||
      cudaStreamCreate(&stream) != cudaSuccess || cudaMalloc(&buf, sizeof(float)) != cudaSuccess) {
    std::fprintf(stderr, "collective_cost_bench: set-up failed\n");
    return 1;
  }
  int64_t spent = 0;
  for (long i = 0; i < calls; ++i) {
    const int64_t t0 = Now();
    ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, comm, stream);
    spent += Now() - t0;
    if (i % 64 == 63) cudaStreamSynchronize(stream);
  }
  cudaStreamSynchronize(stream);
  ncclCommDestroy(comm);
  std::printf("{\"ns_per_call\": %.1f}\n", double(spent) / double(calls));
  return 0;
}
