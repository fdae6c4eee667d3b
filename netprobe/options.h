// Command line of xtimer_netprobe. Parsing is pure: a bad flag gives one line naming the flag and
// what to do, and the program exits with 2.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/env.h"

namespace xtimer::netprobe {

enum class Backend { kTcp, kNccl };
const char* Name(Backend b);

struct Options {
  std::string rdzv_host;
  int rdzv_port = 0;
  int nnodes = 0;
  int node_rank = -1;  // -1: the rendezvous assigns one
  Backend backend = Backend::kTcp;
  int max_rounds = 0;         // 0: auto
  int64_t size = 64ll << 20;  // bytes per direction per test
  int streams = 4;            // parallel TCP streams per direction (tcp backend)
  double min_bandwidth_mbps = 0;
  double straggler_factor = 2.0;
  bool all_pairs = false;
  double timeout_s = env::DefaultDouble("XTIMER_NETPROBE_TIMEOUT");  // --timeout, else XTIMER_NETPROBE_TIMEOUT
  // --connect-timeout: a test's connections must be up by then (at most timeout_s), so a peer
  // that silently drops packets costs this, not the whole deadline.
  double connect_timeout_s = 4;
  // A test clearly slower than the others of its step is stopped and judged from the bytes it
  // moved (early_stop.h; tcp backend; decided by the rendezvous). --no-early-stop: off.
  bool early_stop = true;
  std::string json_path;
  bool serve = false;
  bool help = false;
  bool version = false;

  // Hidden modes: worker processes of the nccl backend (run by netprobe itself).
  std::vector<std::string> worker_args;
};

// Parses argv (without argv[0]). `default_timeout_s` is the XTIMER_NETPROBE_TIMEOUT value.
// Returns false with *error set to one line on a bad command line.
bool ParseOptions(const std::vector<std::string>& args, double default_timeout_s, Options* out, std::string* error);

// HOST:PORT or [V6HOST]:PORT.
bool SplitHostPort(const std::string& s, std::string* host, int* port);

// 64M, 1G, 4096, 512k: bytes (binary multiples).
bool ParseSize(const std::string& s, int64_t* out);

const char* Usage();

}  // namespace xtimer::netprobe
