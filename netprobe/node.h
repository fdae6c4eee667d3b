// One node of a network check: joins the rendezvous (hosting it first when this is node 0 and
// the rendezvous address is one of ours), runs the tests it is told to run, prints the progress
// and the final table, writes the JSON report. Returns the exit status (0, 1 or 2).
//
// The pieces are usable in-process too (xtimer_run --network-check): RendezvousThread hosts
// the rendezvous on a thread of its own, RunNodeSide runs one node and hands back the report.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "netprobe/options.h"

namespace xtimer::netprobe {

class Rendezvous;

int RunNode(const Options& options);
// --serve: the rendezvous alone.
int RunServe(const Options& options);
// The probe itself failed: prints "xtimer_netprobe: <what>" and, with --json, writes a report
// with exit_code 2 and error (docs/formats.md), `self` when >= 0. Returns 2.
int FailProbe(const Options& options, const std::string& what, int self = -1);

// The node side alone: joins the rendezvous at options.rdzv_host:rdzv_port as
// options.node_rank (-1: any) of options.nnodes, runs the tests it is told to run and prints
// the progress and the final table on stdout, as the program does. True with *report (the
// rendezvous' report, docs/formats.md, with "self" set); false with *error (one line, nothing
// printed on stderr) when this node could not finish: the rendezvous unreachable, lost or
// refusing it. Every wait is bounded by options.timeout_s (README.md, "Deadlines").
bool RunNodeSide(const Options& options, nlohmann::json* report, std::string* error);

// The rendezvous on a thread of its own. Not copyable; the destructor waits for the thread.
class RendezvousThread {
 public:
  RendezvousThread();
  RendezvousThread(const RendezvousThread&) = delete;
  RendezvousThread& operator=(const RendezvousThread&) = delete;
  ~RendezvousThread();

  // Listens on host:port ("" = every address, 0 = a free port) and starts the probe for
  // options.nnodes nodes (judging options from `options`). False with *error when it cannot listen.
  bool Start(const Options& options, const std::string& host, int port, std::string* error);
  int port() const { return port_; }  // the bound port, once started
  // Waits until the probe is over and every node had its report; the report (null if never started).
  nlohmann::json Wait();

 private:
  std::unique_ptr<Rendezvous> server_;
  std::thread thread_;
  int port_ = 0;
  nlohmann::json report_;
};

}  // namespace xtimer::netprobe
