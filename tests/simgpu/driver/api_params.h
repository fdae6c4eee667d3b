// The parameters of the driver calls the simulated libcupti's callbacks report, laid out as the
// call's parameter list (what CUPTI's generated_cuda_meta.h structs are; that header cannot be
// included here, it needs the pre-CUDA-3.2 types __CUDA_API_VERSION_INTERNAL hides).
// simgpu_cupti checks the layouts against the real structs.
#pragma once

#include "driver/driver.h"

namespace simgpu::drv {

struct LaunchKernelParams {  // cuLaunchKernel[_ptsz]
  CUfunction f;
  unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_mem;
  CUstream stream;
  void** params;
  void** extra;
};
struct LaunchKernelExParams {  // cuLaunchKernelEx[_ptsz]
  const CUlaunchConfig* config;
  CUfunction f;
  void** params;
  void** extra;
};
struct LaunchCooperativeKernelParams {  // cuLaunchCooperativeKernel[_ptsz]
  CUfunction f;
  unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_mem;
  CUstream stream;
  void** params;
};
struct GraphLaunchParams {  // cuGraphLaunch[_ptsz]
  CUgraphExec exec;
  CUstream stream;
};
struct StreamDestroyParams {  // cuStreamDestroy_v2
  CUstream stream;
};

}  // namespace simgpu::drv
