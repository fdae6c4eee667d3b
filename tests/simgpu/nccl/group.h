// ncclGroupStart/End bookkeeping (per thread).
#pragma once
#include <nccl.h>

namespace simgpu::nccl {

int group_depth();
// A communicator initialised inside a group: its wait for the peers happens at ncclGroupEnd.
void group_add_init(ncclComm_t c);
// Completes a grouped init (no-op otherwise).
ncclResult_t finish_init(ncclComm_t c);

}  // namespace simgpu::nccl
