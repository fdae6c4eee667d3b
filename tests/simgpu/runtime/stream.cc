// Streams, events and graphs: thin translations onto the driver (handles are shared).
#include <cupti_callbacks.h>
#include <cupti_runtime_cbid.h>
#include <generated_cuda_runtime_api_meta.h>

#include "runtime/runtime.h"

using namespace simgpu;
using namespace simgpu::rt;

namespace {

CUstream S(cudaStream_t s) { return reinterpret_cast<CUstream>(s); }
CUevent E(cudaEvent_t e) { return reinterpret_cast<CUevent>(e); }

cudaError_t cudaStreamSynchronize_impl(cudaStream_t s, bool pt) {
  RT_ENTER();
  return from(drv(pt).cuStreamSynchronize(S(s)));
}
cudaError_t cudaStreamQuery_impl(cudaStream_t s, bool pt) {
  RT_ENTER();
  return from(drv(pt).cuStreamQuery(S(s)));
}
cudaError_t cudaStreamWaitEvent_impl(cudaStream_t s, cudaEvent_t e, unsigned flags, bool pt) {
  RT_ENTER();
  return from(drv(pt).cuStreamWaitEvent(S(s), E(e), flags));
}
cudaError_t cudaStreamGetFlags_impl(cudaStream_t s, unsigned* flags, bool pt) {
  RT_ENTER();
  return from(drv(pt).cuStreamGetFlags(S(s), flags));
}
cudaError_t cudaStreamGetPriority_impl(cudaStream_t s, int* prio, bool pt) {
  RT_ENTER();
  return from(drv(pt).cuStreamGetPriority(S(s), prio));
}
cudaError_t cudaStreamGetId_impl(cudaStream_t s, unsigned long long* id, bool pt) {
  RT_ENTER();
  return from(drv(pt).cuStreamGetId(S(s), id));
}
cudaError_t cudaStreamGetDevice_impl(cudaStream_t s, int* dev, bool pt) {
  RT_ENTER();
  CUcontext c = nullptr;
  if (CUresult r = drv(pt).cuStreamGetCtx(S(s), &c)) return from(r);
  CUcontext prev = nullptr;
  drv().cuCtxGetCurrent(&prev);
  drv().cuCtxSetCurrent(c);
  CUdevice d = 0;
  CUresult r = drv().cuCtxGetDevice(&d);
  drv().cuCtxSetCurrent(prev);
  if (dev) *dev = d;
  return from(r);
}
cudaError_t cudaStreamAddCallback_impl(cudaStream_t s, cudaStreamCallback_t cb, void* user, unsigned flags, bool pt) {
  RT_ENTER();
  // Same ABI: (stream, status, user) with int-sized enums.
  return from(drv(pt).cuStreamAddCallback(S(s), reinterpret_cast<CUstreamCallback>(cb), user, flags));
}
cudaError_t cudaEventRecord_impl(cudaEvent_t e, cudaStream_t s, bool pt) {
  RT_ENTER();
  return from(drv(pt).cuEventRecord(E(e), S(s)));
}
cudaError_t cudaEventRecordWithFlags_impl(cudaEvent_t e, cudaStream_t s, unsigned flags, bool pt) {
  RT_ENTER();
  return from(drv(pt).cuEventRecordWithFlags(E(e), S(s), flags));
}
cudaError_t cudaStreamBeginCapture_impl(cudaStream_t s, cudaStreamCaptureMode mode, bool pt) {
  RT_ENTER();
  return from(drv(pt).cuStreamBeginCapture_v2(S(s), static_cast<CUstreamCaptureMode>(mode)));
}
cudaError_t cudaStreamEndCapture_impl(cudaStream_t s, cudaGraph_t* g, bool pt) {
  RT_ENTER();
  return from(drv(pt).cuStreamEndCapture(S(s), reinterpret_cast<CUgraph*>(g)));
}
cudaError_t cudaStreamIsCapturing_impl(cudaStream_t s, cudaStreamCaptureStatus* status, bool pt) {
  RT_ENTER();
  return from(drv(pt).cuStreamIsCapturing(S(s), reinterpret_cast<CUstreamCaptureStatus*>(status)));
}
cudaError_t cudaStreamGetCaptureInfo_impl(cudaStream_t s, cudaStreamCaptureStatus* status, unsigned long long* id,
                                          cudaGraph_t* graph, const cudaGraphNode_t** deps,
                                          const cudaGraphEdgeData** edges, size_t* ndeps, bool pt) {
  RT_ENTER();
  return from(drv(pt).cuStreamGetCaptureInfo_v3(S(s), reinterpret_cast<CUstreamCaptureStatus*>(status),
                                                reinterpret_cast<cuuint64_t*>(id), reinterpret_cast<CUgraph*>(graph),
                                                reinterpret_cast<const CUgraphNode**>(deps),
                                                reinterpret_cast<const CUgraphEdgeData**>(edges), ndeps));
}
cudaError_t cudaGraphLaunch_impl(cudaGraphExec_t x, cudaStream_t s, bool pt) {
  RT_ENTER();
  cudaGraphLaunch_v10000_params p{x, s};
  ApiScope api(
      pt ? CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000 : CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
      pt ? "cudaGraphLaunch_ptsz" : "cudaGraphLaunch", &p);
  return api.done(from(drv(pt).cuGraphLaunch(reinterpret_cast<CUgraphExec>(x), S(s))));
}
cudaError_t cudaGraphUpload_impl(cudaGraphExec_t x, cudaStream_t s, bool pt) {
  RT_ENTER();
  return from(drv(pt).cuGraphUpload(reinterpret_cast<CUgraphExec>(x), S(s)));
}

}  // namespace

SIMGPU_EXPORT cudaError_t cudaStreamCreate(cudaStream_t* s) {
  RT_ENTER();
  return from(drv().cuStreamCreate(reinterpret_cast<CUstream*>(s), CU_STREAM_DEFAULT));
}

SIMGPU_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  RT_ENTER();
  return from(drv().cuStreamCreate(reinterpret_cast<CUstream*>(s), flags));
}

SIMGPU_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int flags, int priority) {
  RT_ENTER();
  return from(drv().cuStreamCreateWithPriority(reinterpret_cast<CUstream*>(s), flags, priority));
}

SIMGPU_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s) {
  RT_ENTER();
  cudaStreamDestroy_v5050_params p{s};
  ApiScope api(CUPTI_RUNTIME_TRACE_CBID_cudaStreamDestroy_v5050, "cudaStreamDestroy", &p);
  return api.done(from(drv().cuStreamDestroy_v2(S(s))));
}

RT_DEFINE_PTSZ(cudaStreamSynchronize, (cudaStream_t s), s)
RT_DEFINE_PTSZ(cudaStreamQuery, (cudaStream_t s), s)
RT_DEFINE_PTSZ(cudaStreamWaitEvent, (cudaStream_t s, cudaEvent_t e, unsigned int flags), s, e, flags)
RT_DEFINE_PTSZ(cudaStreamGetFlags, (cudaStream_t s, unsigned int* flags), s, flags)
RT_DEFINE_PTSZ(cudaStreamGetPriority, (cudaStream_t s, int* priority), s, priority)
RT_DEFINE_PTSZ(cudaStreamGetId, (cudaStream_t s, unsigned long long* id), s, id)
RT_DEFINE_PTSZ(cudaStreamGetDevice, (cudaStream_t s, int* dev), s, dev)
RT_DEFINE_PTSZ(cudaStreamAddCallback, (cudaStream_t s, cudaStreamCallback_t cb, void* user, unsigned int flags), s, cb,
               user, flags)
RT_DEFINE_PTSZ(cudaEventRecord, (cudaEvent_t e, cudaStream_t s), e, s)
RT_DEFINE_PTSZ(cudaEventRecordWithFlags, (cudaEvent_t e, cudaStream_t s, unsigned int flags), e, s, flags)
RT_DEFINE_PTSZ(cudaStreamBeginCapture, (cudaStream_t s, cudaStreamCaptureMode mode), s, mode)
RT_DEFINE_PTSZ(cudaStreamEndCapture, (cudaStream_t s, cudaGraph_t* g), s, g)
RT_DEFINE_PTSZ(cudaStreamIsCapturing, (cudaStream_t s, cudaStreamCaptureStatus* status), s, status)
RT_DEFINE_PTSZ(cudaStreamGetCaptureInfo,
               (cudaStream_t s, cudaStreamCaptureStatus* status, unsigned long long* id, cudaGraph_t* graph,
                const cudaGraphNode_t** deps, const cudaGraphEdgeData** edges, size_t* ndeps),
               s, status, id, graph, deps, edges, ndeps)
RT_DEFINE_PTSZ(cudaGraphLaunch, (cudaGraphExec_t x, cudaStream_t s), x, s)
RT_DEFINE_PTSZ(cudaGraphUpload, (cudaGraphExec_t x, cudaStream_t s), x, s)

SIMGPU_EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  return mode ? cudaSuccess : record(cudaErrorInvalidValue);
}

SIMGPU_EXPORT cudaError_t cudaEventCreate(cudaEvent_t* e) {
  RT_ENTER();
  return from(drv().cuEventCreate(reinterpret_cast<CUevent*>(e), CU_EVENT_DEFAULT));
}

SIMGPU_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  RT_ENTER();
  return from(drv().cuEventCreate(reinterpret_cast<CUevent*>(e), flags));
}

SIMGPU_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e) {
  RT_ENTER();
  return from(drv().cuEventDestroy_v2(E(e)));
}

SIMGPU_EXPORT cudaError_t cudaEventQuery(cudaEvent_t e) {
  RT_ENTER();
  return from(drv().cuEventQuery(E(e)));
}

SIMGPU_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  RT_ENTER();
  return from(drv().cuEventSynchronize(E(e)));
}

SIMGPU_EXPORT cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  RT_ENTER();
  return from(drv().cuEventElapsedTime_v2(ms, E(a), E(b)));
}

SIMGPU_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t* x, cudaGraph_t g, unsigned long long flags) {
  RT_ENTER();
  return from(
      drv().cuGraphInstantiateWithFlags(reinterpret_cast<CUgraphExec*>(x), reinterpret_cast<CUgraph>(g), flags));
}

SIMGPU_EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* x, cudaGraph_t g, unsigned long long flags) {
  return cudaGraphInstantiate(x, g, flags);
}

SIMGPU_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x) {
  RT_ENTER();
  return from(drv().cuGraphExecDestroy(reinterpret_cast<CUgraphExec>(x)));
}

SIMGPU_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  RT_ENTER();
  return from(drv().cuGraphDestroy(reinterpret_cast<CUgraph>(g)));
}
