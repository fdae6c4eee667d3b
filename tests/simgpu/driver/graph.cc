// Minimal CUDA graphs: a capture records the ops enqueued on the capturing streams
// (in issue order) instead of running them; a launch replays the list on a stream.

#include "driver/api_params.h"
#include "driver/driver.h"
// After driver.h, which selects the API version cuda.h declares.
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>

using namespace simgpu::drv;

namespace {

std::atomic<uint64_t> g_capture_ids{1};

CUresult cuStreamBeginCapture_v2_impl(CUstream h, CUstreamCaptureMode mode, bool ptds) {
  if (CUresult st = init_status()) return st;
  CUresult err;
  Stream* s = resolve_stream(h, ptds, &err);
  if (!s) return err;
  if (s->kind == Stream::Kind::Legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  auto g = std::make_shared<Graph>();
  g->magic = kGraphMagic;
  g->capturing = true;
  g->origin = s;
  g->capture_id = g_capture_ids.fetch_add(1);
  g->members.push_back(s->shared_from_this());
  std::lock_guard lk(s->m);
  if (s->capture) return CUDA_ERROR_ILLEGAL_STATE;
  s->capture = std::move(g);
  return CUDA_SUCCESS;
}

CUresult cuStreamBeginCapture_impl(CUstream h, bool ptds) {
  return cuStreamBeginCapture_v2_impl(h, CU_STREAM_CAPTURE_MODE_GLOBAL, ptds);
}

CUresult cuStreamEndCapture_impl(CUstream h, CUgraph* out, bool ptds) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = init_status()) return st;
  CUresult err;
  Stream* s = resolve_stream(h, ptds, &err);
  if (!s) return err;
  std::shared_ptr<Graph> g;
  {
    std::lock_guard lk(s->m);
    g = s->capture;
  }
  if (!g) return CUDA_ERROR_ILLEGAL_STATE;
  if (g->origin != s) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  std::vector<std::shared_ptr<Stream>> members;
  {
    std::lock_guard gl(g->m);
    g->capturing = false;
    members.swap(g->members);
  }
  for (auto& m : members) {
    std::lock_guard lk(m->m);
    if (m->capture == g) m->capture.reset();
  }
  g->self = g;
  *out = reinterpret_cast<CUgraph>(g.get());
  return CUDA_SUCCESS;
}

CUresult cuStreamIsCapturing_impl(CUstream h, CUstreamCaptureStatus* status, bool ptds) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = init_status()) return st;
  CUresult err;
  Stream* s = resolve_stream(h, ptds, &err);
  if (!s) return err;
  std::lock_guard lk(s->m);
  *status = s->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

CUresult cuStreamGetCaptureInfo_v3_impl(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                                        const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* ndeps,
                                        bool ptds) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = init_status()) return st;
  CUresult err;
  Stream* s = resolve_stream(h, ptds, &err);
  if (!s) return err;
  std::lock_guard lk(s->m);
  *status = s->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  if (id) *id = s->capture ? s->capture->capture_id : 0;
  if (graph) *graph = s->capture ? reinterpret_cast<CUgraph>(s->capture.get()) : nullptr;
  if (deps) *deps = nullptr;
  if (edges) *edges = nullptr;
  if (ndeps) *ndeps = 0;
  return CUDA_SUCCESS;
}

GraphExec* as_exec(CUgraphExec e) {
  auto* x = reinterpret_cast<GraphExec*>(e);
  return (x && x->magic == kExecMagic) ? x : nullptr;
}

Graph* as_graph(CUgraph g) {
  auto* x = reinterpret_cast<Graph*>(g);
  return (x && x->magic == kGraphMagic) ? x : nullptr;
}

CUresult graph_launch(CUgraphExec e, CUstream h, bool ptds) {
  if (CUresult st = init_status()) return st;
  GraphExec* x = as_exec(e);
  if (!x || !x->self) return CUDA_ERROR_INVALID_HANDLE;
  CUresult err;
  Stream* s = resolve_stream(h, ptds, &err);
  if (!s) return err;
  Op op;
  op.kind = OpKind::GraphExec;
  op.ref = x->self;
  enqueue(s, std::move(op));
  return CUDA_SUCCESS;
}

CUresult cuGraphLaunch_impl(CUgraphExec e, CUstream h, bool ptds) {
  GraphLaunchParams p{e, h};
  ApiScope api(CUPTI_CB_DOMAIN_DRIVER_API,
               ptds ? CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz : CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
               ptds ? "cuGraphLaunch_ptsz" : "cuGraphLaunch", &p);
  return api.done(graph_launch(e, h, ptds));
}

CUresult cuGraphUpload_impl(CUgraphExec e, CUstream, bool) {
  if (CUresult st = init_status()) return st;
  return as_exec(e) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

}  // namespace

SIMGPU_DEFINE_PTSZ(cuStreamBeginCapture_v2, (CUstream h, CUstreamCaptureMode mode), h, mode)
SIMGPU_DEFINE_PTSZ(cuStreamBeginCapture, (CUstream h), h)
SIMGPU_DEFINE_PTSZ(cuStreamEndCapture, (CUstream h, CUgraph* graph), h, graph)
SIMGPU_DEFINE_PTSZ(cuStreamIsCapturing, (CUstream h, CUstreamCaptureStatus* status), h, status)
SIMGPU_DEFINE_PTSZ(cuStreamGetCaptureInfo_v3,
                   (CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph, const CUgraphNode** deps,
                    const CUgraphEdgeData** edges, size_t* ndeps),
                   h, status, id, graph, deps, edges, ndeps)
SIMGPU_DEFINE_PTSZ(cuGraphLaunch, (CUgraphExec e, CUstream h), e, h)
SIMGPU_DEFINE_PTSZ(cuGraphUpload, (CUgraphExec e, CUstream h), e, h)

SIMGPU_EXPORT CUresult cuGraphCreate(CUgraph* out, unsigned int flags) {
  if (!out || flags) return CUDA_ERROR_INVALID_VALUE;
  auto g = std::make_shared<Graph>();
  g->magic = kGraphMagic;
  g->self = g;
  *out = reinterpret_cast<CUgraph>(g.get());
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph graph, unsigned long long) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult st = init_status()) return st;
  Graph* g = as_graph(graph);
  if (!g) return CUDA_ERROR_INVALID_HANDLE;
  auto x = std::make_shared<GraphExec>();
  x->magic = kExecMagic;
  {
    std::lock_guard lk(g->m);
    x->ops = g->ops;  // shares copied kernel parameters with the graph
  }
  x->self = x;
  *out = reinterpret_cast<CUgraphExec>(x.get());
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGraphExecDestroy(CUgraphExec e) {
  GraphExec* x = as_exec(e);
  if (!x || !x->self) return CUDA_ERROR_INVALID_HANDLE;
  auto hold = std::move(x->self);
  hold->magic = 0;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuGraphDestroy(CUgraph graph) {
  Graph* g = as_graph(graph);
  if (!g || !g->self) return CUDA_ERROR_INVALID_HANDLE;
  auto hold = std::move(g->self);
  hold->magic = 0;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  return mode ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
