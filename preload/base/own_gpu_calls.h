// The few CUDA calls the library itself makes (event create/record/query/elapsed), through
// whichever of runtime or driver the process has loaded, resolved without linking CUDA.
// cudaEvent_t and CUevent are the same object; so are cudaStream_t and CUstream.
#pragma once

#include <cstdint>

namespace xtimer::gpu {

using Event = void*;   // CUevent / cudaEvent_t
using Stream = void*;  // CUstream / cudaStream_t

enum class Path : uint8_t { kRuntime, kDriver };
enum class Query { kDone, kNotReady, kError };

// True once some CUDA library is loaded and events can be made.
bool Available();

// Device of the calling thread's current context (runtime: cudaGetDevice; driver:
// cuCtxGetDevice). -1 if unknown.
int CurrentDevice(Path path);

// Creates a timing event on `device`. Called from the launching thread (runtime path: the
// runtime makes its context current itself; driver path: the current context) or from the
// poller (which selects the device first). nullptr on failure.
Event CreateEvent(int device, Path path, bool switch_device);

// Records on `stream`. `per_thread` means stream 0 is the per-thread default stream (the _ptsz
// API forms). Clears the runtime's per-thread last error if the record fails, so the
// application never sees an error that is ours.
bool Record(Event e, Stream stream, Path path, bool per_thread);

Query QueryEvent(Event e);
// Whether `stream` has finished all its work (cuStreamQuery); with stream == nullptr, the legacy
// default stream of `context`, made current for the call. Never on a stream being captured.
Query QueryStream(Stream stream, void* context);
// Milliseconds between two completed events; < 0 on error.
double ElapsedMs(Event start, Event end);
// The same, negative when `end` completed first; kNotReady while either has not completed.
Query ElapsedMs(Event start, Event end, double* ms);
void DestroyEvent(Event e);
// Resource-free stream for the library's own events (trace clock); nullptr on failure.
Stream CreatePrivateStream(int device);

}  // namespace xtimer::gpu
