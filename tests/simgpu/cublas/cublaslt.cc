// libcublasLt.so.13: descriptors, a one-algorithm heuristic and cublasLtMatmul. The state of
// each descriptor lives inside its public opaque struct, so the *Init_internal forms that
// callers use on stack-allocated descriptors work too.
#include <cublasLt.h>

#include <cstring>
#include <new>

#include "cublas/gemm.h"

#define SIMGPU_EXPORT extern "C" __attribute__((visibility("default")))

struct cublasLtContext {
  static constexpr uint32_t kMagic = 0x43424c54;
  uint32_t magic = kMagic;
};

namespace {

// Attribute store for descriptors: (id, size, value up to 8 bytes).
struct Attr {
  uint32_t id;
  uint32_t size;
  uint64_t value;
};

template <int N>
struct AttrTable {
  uint32_t count = 0;
  uint32_t pad = 0;
  Attr a[N];

  cublasStatus_t set(uint32_t id, const void* buf, size_t size) {
    if (!buf || size == 0 || size > 8) return CUBLAS_STATUS_INVALID_VALUE;
    Attr* slot = find(id);
    if (!slot) {
      if (count == N) return CUBLAS_STATUS_NOT_SUPPORTED;
      slot = &a[count++];
      slot->id = id;
    }
    slot->size = uint32_t(size);
    slot->value = 0;
    memcpy(&slot->value, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  }
  Attr* find(uint32_t id) {
    for (uint32_t i = 0; i < count; ++i)
      if (a[i].id == id) return &a[i];
    return nullptr;
  }
  uint64_t get(uint32_t id, uint64_t def) {
    Attr* s = find(id);
    return s ? s->value : def;
  }
  // Real semantics: size 0 asks for the size; an unset attribute reads as its default.
  cublasStatus_t read(uint32_t id, uint64_t def, uint32_t def_size, void* buf, size_t size, size_t* written) {
    Attr* s = find(id);
    const uint32_t need = s ? s->size : def_size;
    const uint64_t v = s ? s->value : def;
    if (written) *written = need;
    if (size == 0 && written) return CUBLAS_STATUS_SUCCESS;
    if (!buf || size < need) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(buf, &v, need);
    return CUBLAS_STATUS_SUCCESS;
  }
};

struct Desc {
  static constexpr uint32_t kMagic = 0x4c54444d;
  uint32_t magic;
  uint32_t pad;
  AttrTable<15> attrs;
};
static_assert(sizeof(Desc) <= sizeof(cublasLtMatmulDescOpaque_t));

struct Layout {
  static constexpr uint32_t kMagic = 0x4c544c59;
  uint32_t magic;
  uint32_t type;
  int32_t order;
  int32_t batch;
  uint64_t rows;
  uint64_t cols;
  int64_t ld;
  int64_t stride;
  int64_t plane;
};
static_assert(sizeof(Layout) <= sizeof(cublasLtMatrixLayoutOpaque_t));

struct Pref {
  static constexpr uint32_t kMagic = 0x4c545046;
  uint32_t magic;
  uint32_t pad;
  AttrTable<2> attrs;
};
static_assert(sizeof(Pref) <= sizeof(cublasLtMatmulPreferenceOpaque_t));

Desc* D(cublasLtMatmulDesc_t d) {
  auto* p = reinterpret_cast<Desc*>(d);
  return (p && p->magic == Desc::kMagic) ? p : nullptr;
}
Layout* L(cublasLtMatrixLayout_t l) {
  auto* p = reinterpret_cast<Layout*>(l);
  return (p && p->magic == Layout::kMagic) ? p : nullptr;
}
Pref* P(cublasLtMatmulPreference_t p) {
  auto* x = reinterpret_cast<Pref*>(p);
  return (x && x->magic == Pref::kMagic) ? x : nullptr;
}

void init_desc(void* mem, cublasComputeType_t compute, cudaDataType_t scale) {
  memset(mem, 0, sizeof(cublasLtMatmulDescOpaque_t));
  auto* d = new (mem) Desc{};
  d->magic = Desc::kMagic;
  const int32_t c = compute, s = scale;
  d->attrs.set(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &c, sizeof c);
  d->attrs.set(CUBLASLT_MATMUL_DESC_SCALE_TYPE, &s, sizeof s);
}

void init_layout(void* mem, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld) {
  memset(mem, 0, sizeof(cublasLtMatrixLayoutOpaque_t));
  auto* l = new (mem) Layout{};
  l->magic = Layout::kMagic;
  l->type = uint32_t(type);
  l->order = CUBLASLT_ORDER_COL;
  l->batch = 1;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
}

void init_pref(void* mem) {
  memset(mem, 0, sizeof(cublasLtMatmulPreferenceOpaque_t));
  auto* p = new (mem) Pref{};
  p->magic = Pref::kMagic;
}

bool valid(cublasLtHandle_t h) {
  return h && (h->magic == cublasLtContext::kMagic || h->magic == simgpu::blas::kCublasHandleMagic);
}

}  // namespace

SIMGPU_EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  if (!h) return CUBLAS_STATUS_INVALID_VALUE;
  if (!simgpu::blas::driver_ready()) return CUBLAS_STATUS_NOT_INITIALIZED;
  *h = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  if (!h || h->magic != cublasLtContext::kMagic) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->magic = 0;
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT size_t cublasLtGetVersion() { return CUBLAS_VERSION; }
SIMGPU_EXPORT size_t cublasLtGetCudartVersion() { return 13000; }

SIMGPU_EXPORT cublasStatus_t cublasLtMatmulDescInit_internal(cublasLtMatmulDesc_t d, size_t size,
                                                             cublasComputeType_t compute, cudaDataType_t scale) {
  if (!d || size < sizeof(cublasLtMatmulDescOpaque_t)) return CUBLAS_STATUS_INVALID_VALUE;
  init_desc(d, compute, scale);
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute,
                                                      cudaDataType_t scale) {
  if (!d) return CUBLAS_STATUS_INVALID_VALUE;
  auto* mem = new cublasLtMatmulDescOpaque_t;
  init_desc(mem, compute, scale);
  *d = mem;
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  if (!d) return CUBLAS_STATUS_SUCCESS;
  if (!D(d)) return CUBLAS_STATUS_INVALID_VALUE;
  D(d)->magic = 0;
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                            const void* buf, size_t size) {
  Desc* x = D(d);
  if (!x) return CUBLAS_STATUS_INVALID_VALUE;
  return x->attrs.set(attr, buf, size);
}

SIMGPU_EXPORT cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                            void* buf, size_t size, size_t* written) {
  Desc* x = D(d);
  if (!x) return CUBLAS_STATUS_INVALID_VALUE;
  return x->attrs.read(attr, 0, 4, buf, size, written);
}

SIMGPU_EXPORT cublasStatus_t cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t l, size_t size, cudaDataType type,
                                                               uint64_t rows, uint64_t cols, int64_t ld) {
  if (!l || size < sizeof(cublasLtMatrixLayoutOpaque_t)) return CUBLAS_STATUS_INVALID_VALUE;
  init_layout(l, type, rows, cols, ld);
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows,
                                                        uint64_t cols, int64_t ld) {
  if (!l) return CUBLAS_STATUS_INVALID_VALUE;
  auto* mem = new cublasLtMatrixLayoutOpaque_t;
  init_layout(mem, type, rows, cols, ld);
  *l = mem;
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(const cublasLtMatrixLayout_t l) {
  if (!l) return CUBLAS_STATUS_SUCCESS;
  if (!L(l)) return CUBLAS_STATUS_INVALID_VALUE;
  L(l)->magic = 0;
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                              cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                                                              size_t size) {
  Layout* x = L(l);
  if (!x || !buf) return CUBLAS_STATUS_INVALID_VALUE;
  auto take = [&](auto& field) {
    if (size != sizeof field) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(&field, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return take(x->type);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return take(x->order);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return take(x->rows);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return take(x->cols);
    case CUBLASLT_MATRIX_LAYOUT_LD: return take(x->ld);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return take(x->batch);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return take(x->stride);
    case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: return take(x->plane);
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

SIMGPU_EXPORT cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t l,
                                                              cublasLtMatrixLayoutAttribute_t attr, void* buf,
                                                              size_t size, size_t* written) {
  Layout* x = L(l);
  if (!x) return CUBLAS_STATUS_INVALID_VALUE;
  auto give = [&](const auto& field) {
    if (written) *written = sizeof field;
    if (size == 0 && written) return CUBLAS_STATUS_SUCCESS;
    if (!buf || size < sizeof field) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(buf, &field, sizeof field);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return give(x->type);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return give(x->order);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return give(x->rows);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return give(x->cols);
    case CUBLASLT_MATRIX_LAYOUT_LD: return give(x->ld);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return give(x->batch);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return give(x->stride);
    case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: return give(x->plane);
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

SIMGPU_EXPORT cublasStatus_t cublasLtMatmulPreferenceInit_internal(cublasLtMatmulPreference_t p, size_t size) {
  if (!p || size < sizeof(cublasLtMatmulPreferenceOpaque_t)) return CUBLAS_STATUS_INVALID_VALUE;
  init_pref(p);
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  if (!p) return CUBLAS_STATUS_INVALID_VALUE;
  auto* mem = new cublasLtMatmulPreferenceOpaque_t;
  init_pref(mem);
  *p = mem;
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  if (!p) return CUBLAS_STATUS_SUCCESS;
  if (!P(p)) return CUBLAS_STATUS_INVALID_VALUE;
  P(p)->magic = 0;
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}

SIMGPU_EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                                  cublasLtMatmulPreferenceAttributes_t attr,
                                                                  const void* buf, size_t size) {
  Pref* x = P(p);
  if (!x) return CUBLAS_STATUS_INVALID_VALUE;
  cublasStatus_t st = x->attrs.set(attr, buf, size);
  return st == CUBLAS_STATUS_NOT_SUPPORTED ? CUBLAS_STATUS_SUCCESS : st;  // only two are remembered
}

SIMGPU_EXPORT cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t p,
                                                                  cublasLtMatmulPreferenceAttributes_t attr, void* buf,
                                                                  size_t size, size_t* written) {
  Pref* x = P(p);
  if (!x) return CUBLAS_STATUS_INVALID_VALUE;
  return x->attrs.read(attr, 0, attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES ? 8 : 4, buf, size, written);
}

SIMGPU_EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                                            cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                            cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                                            cublasLtMatmulPreference_t, int requested,
                                                            cublasLtMatmulHeuristicResult_t results[], int* count) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!D(desc) || !L(a) || !L(b) || !L(c) || !L(d) || requested < 1 || !results || !count)
    return CUBLAS_STATUS_INVALID_VALUE;
  memset(&results[0], 0, sizeof results[0]);
  results[0].algo.data[0] = 0x73696d67707521ULL;  // "simgpu!": the one algorithm there is
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *count = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// m, n from D; k from A and TRANSA (op(A) is m x k); batch from D.
SIMGPU_EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void*, const void*,
                                            cublasLtMatrixLayout_t adesc, const void*, cublasLtMatrixLayout_t bdesc,
                                            const void*, const void*, cublasLtMatrixLayout_t cdesc, void*,
                                            cublasLtMatrixLayout_t ddesc, const cublasLtMatmulAlgo_t*, void*, size_t,
                                            cudaStream_t stream) {
  if (!valid(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
  Desc* x = D(desc);
  Layout *A = L(adesc), *B = L(bdesc), *Dl = L(ddesc);
  if (!x || !A || !B || !Dl || (cdesc && !L(cdesc))) return CUBLAS_STATUS_INVALID_VALUE;
  const auto transa = static_cast<cublasOperation_t>(x->attrs.get(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_N));
  const int64_t m = int64_t(Dl->rows), n = int64_t(Dl->cols);
  const int64_t k = int64_t(transa == CUBLAS_OP_N ? A->cols : A->rows);
  const int64_t batch = Dl->batch < 1 ? 1 : Dl->batch;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const int compute = int(x->attrs.get(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, CUBLAS_COMPUTE_32F));
  CUresult r = simgpu::blas::launch_gemm(simgpu::blas::kernel_for(int(A->type), compute, false), m, n, k, batch,
                                         reinterpret_cast<CUstream>(stream));
  return r == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

SIMGPU_EXPORT const char* cublasLtGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_INTERNAL_ERROR";
  }
}

SIMGPU_EXPORT const char* cublasLtGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "an internal operation failed";
  }
}
