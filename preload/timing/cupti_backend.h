// The CUPTI timing backend: kernels, copies and memsets timed from CUPTI Activity API records
// (start/end on the GPU clock), whatever launched them — a dlsym'd cuLaunchKernelEx as
// Triton's launcher does, a CUDA graph replay, the runtime, the driver. libcupti.so.13 is
// loaded with dlopen at the first CUDA call; nothing is linked. When it is absent, another
// tool holds CUPTI's one subscriber slot (PyTorch's profiler, Nsight), or XTIMER_CUPTI=0,
// Start fails with the reason and the library times with event pairs alone.
//
// Division of work in CUPTI mode (docs/design.md, "Timing modes"): cuBLAS/cuBLASLt matmuls,
// NCCL collectives/p2p and graph launches keep their event pairs (names, shapes, bytes, and
// the in-flight record the watchdog needs); the kernels a matmul or collective launches are
// marked with an external correlation id (EnterOwnedCall/LeaveOwnedCall around the call) and
// not counted again. Every other kernel, copy and memset is counted and timed from its record.
// A graph launch no hook saw (a dlsym'd cuGraphLaunch) gets its event pair from CUPTI's callback.
//
// Hangs: records exist only once an op has ended, so CUPTI's API callback on every kernel and
// graph launch (and stream destroy) tells Watch() which streams have unfinished work.
//
// Another client (torch.profiler's Kineto, a tool using the Activity API) comes second: Start
// registers HandOver with libxtimer_cupti_handover.so (base/cupti_handover.h), whose CUPTI entry
// points call it first, and the library lets go of CUPTI (its records flushed for the poller, its
// kinds and callbacks disabled, the slot freed), says so once and times with event pairs from
// then on, for the rest of the process. A client that comes first (it called CUPTI before the
// library's Start) keeps CUPTI: Start refuses.
//
// Threads: Start and SetLaunchPath run once under the tracker's creation lock; Active/Enter/Leave
// and the API callback on the launch path (no lock, no allocation of ours); Drain on the poller
// thread only; HandOver on the other client's thread, under a lock of its own that Start takes
// too (never on the launch path: a launch that raced it is timed by neither, never by both).
// CUPTI calls the buffer callbacks on its own thread or the flushing (poller) thread.
#pragma once

#include <cstdint>
#include <string>

#include "preload/timing/op_class.h"

namespace xtimer {

class LaunchPath;
class StreamWatch;

// One completed kernel, copy or memset, decoded from its record.
struct CuptiOp {
  enum class What : uint8_t { kKernel, kMemcpy, kMemset };
  What what = What::kKernel;
  const char* name = nullptr;  // kernel: its (mangled) name, valid during the Drain callback
  int memcpy_kind = 0;         // memcpy: cudaMemcpyKind
  bool async = false;          // memcpy/memset: from an *Async call
  uint64_t start_ns = 0;       // host CLOCK_MONOTONIC
  uint64_t dur_ns = 0;
  uint32_t device = 0;
  uint32_t context = 0;  // CUPTI context id
  uint32_t stream = 0;   // CUPTI stream id
  uint64_t bytes = 0;
};

namespace cupti {

// Loads libcupti, takes the subscriber slot, registers the buffer callbacks and enables the
// kernel, memcpy, memset and external-correlation activity kinds. False, with a one-line
// reason, if any step fails (everything done so far is undone).
bool Start(std::string* reason);

// The launch path a graph launch no hook saw is timed on from CUPTI's callback: set once the
// library runs (the tracker, after Start), null again in a forked child.
void SetLaunchPath(LaunchPath* launch);

// Launch path: whether CUPTI times plain kernels and copies (one relaxed load). False again once
// the library handed CUPTI over.
bool Active();

// Another CUPTI client calls `entry_point` (hooks/cupti_handover.cc, once Start registered this).
// If the library holds CUPTI it lets go before returning: it disables its API callbacks and
// activity kinds, flushes its records (Drain still reads them), unsubscribes, logs one line and
// Active() is false. Safe from any thread.
void HandOver(const char* entry_point);

// Why kernels are no longer timed from CUPTI after a hand-over, for the summary's timing_note;
// nullptr before (or without) one.
const char* HandOverNote();

// The streams with unfinished work, fed by CUPTI's launch callbacks and the records Drain
// decodes (stream_watch.h); nullptr unless CUPTI mode runs.
StreamWatch* Watch();

// Launch path: brackets a matmul/collective call whose kernels its event pair already times.
void EnterOwnedCall(uint32_t class_id);
void LeaveOwnedCall();

// Poller, outside its lock (a flush may take a while): asks CUPTI for its buffers, every call
// when `force`, else at most every 100 ms. Returns when it flushed (CLOCK_MONOTONIC), 0 if it
// did not: every op that had ended by then is in the buffers the next Drain reads.
uint64_t Flush(bool force);
// Poller: hands each completed op of the buffers CUPTI returned so far, not owned by a
// matmul/collective, to `sink(ctx, op)`; every completed op, owned or not, is progress on its
// stream for Watch().
void Drain(void (*sink)(void* ctx, const CuptiOp& op), void* ctx);

// Records CUPTI could not store (no buffer), and records lost to unknown kinds.
uint64_t Dropped();

}  // namespace cupti
}  // namespace xtimer
