// The nccl backend and the local GPU ("switchbox") check. The GPU work runs in a child process
// (this executable with --internal-worker) that the node kills at the deadline; the node itself
// never loads CUDA. Figures follow nccl-tests: algorithm bandwidth = bytes / time, bus bandwidth
// = algbw x 2(n-1)/n for allreduce and = algbw for send/recv (n = 2 ranks here).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "netprobe/judge.h"
#include "common/net/net.h"

namespace xtimer::netprobe {

// Entry point of the hidden worker mode (argv after --internal-worker). Prints its answers as
// lines "XTNP-WORKER <json>" on stdout. Returns the process exit status.
int RunGpuWorker(const std::vector<std::string>& args);

// Initiator (NCCL rank 0): starts the worker, passes its unique id to `send_uid` (which relays it
// through the rendezvous to the responder), then collects the figures.
void RunNcclInitiator(int64_t size, const std::function<bool(const std::string&, std::string*)>& send_uid,
                      net::Deadline deadline, TestResult* out);
// Responder (NCCL rank 1) with the initiator's unique id (hex).
bool RunNcclResponder(int64_t size, const std::string& uid_hex, net::Deadline deadline, std::string* error);

// Copy bandwidth host -> each GPU and between each ordered pair of local GPUs.
LocalResult RunLocalGpuCheck(int64_t size, net::Deadline deadline);

// Pure helpers (unit-tested).
std::string HexEncode(const void* data, size_t n);
bool HexDecode(const std::string& hex, void* out, size_t n);
double AllReduceBusBandwidth(double bytes, double seconds, int nranks);  // MB/s

}  // namespace xtimer::netprobe
