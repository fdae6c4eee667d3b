// Test helper: a StackFile as the JSON text of docs/formats.md, and short builders for hand-made
// stack sets. (The real writer lives in the preloaded library; this one only feeds tests.)
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/stacks/stack_file.h"

namespace xtimer::testing {

inline std::string StackFileToJson(const StackFile& f, int indent = -1) {
  using J = nlohmann::ordered_json;
  J j;
  j["format"] = kStackFileFormat;
  j["version"] = f.version ? f.version : kStackFileVersion;
  j["rank"] = f.rank;
  j["world_size"] = f.world_size;
  j["local_rank"] = f.local_rank;
  j["host"] = f.host;
  j["pid"] = f.pid;
  j["reason"] = f.reason;
  j["time"] = f.time;
  j["symbolized"] = f.symbolized;
  j["process_state"] = {{"code", f.process_state_code}, {"name", f.process_state_name}};
  if (!f.trigger.empty()) j["trigger"] = f.trigger;
  j["inflight_ops"] = J::array();
  for (const InflightOp& o : f.inflight_ops) {
    J op = {{"name", o.name}, {"kind", o.kind}, {"stream", o.stream}};
    if (!o.comm.empty()) op["comm"] = o.comm, op["comm_rank"] = o.comm_rank, op["comm_size"] = o.comm_size;
    if (o.seq >= 0) op["seq"] = o.seq;
    op["peer"] = o.peer;
    op["bytes"] = o.bytes;
    op["state"] = o.state;
    op["in_flight_s"] = o.in_flight_s;
    j["inflight_ops"].push_back(op);
  }
  j["threads"] = J::array();
  for (const StackThread& t : f.threads) {
    J jt = {{"tid", t.tid}, {"name", t.name}, {"main", t.main}};
    if (!t.python_name.empty()) jt["python_name"] = t.python_name;
    jt["holds_gil"] = t.holds_gil ? J(*t.holds_gil) : J(nullptr);
    jt["state"] = t.state;
    jt["native"] = J::array();
    for (const NativeFrame& n : t.native) {
      J fr = {{"module", n.module}, {"offset", n.offset}};
      if (!n.function.empty()) fr["function"] = n.function;
      if (!n.file.empty()) fr["file"] = n.file, fr["line"] = n.line;
      fr["inlined"] = n.inlined;
      jt["native"].push_back(fr);
    }
    jt["python"] = J::array();
    for (const PythonFrame& p : t.python)
      jt["python"].push_back({{"function", p.function}, {"file", p.file}, {"line", p.line}});
    j["threads"].push_back(jt);
  }
  return j.dump(indent);
}

inline NativeFrame Native(std::string function, std::string module = "/usr/lib/libtorch_cuda.so", std::string file = "",
                          int64_t line = 0) {
  NativeFrame f;
  f.module = std::move(module);
  f.offset = "0x1000";
  f.function = std::move(function);
  f.file = std::move(file);
  f.line = line;
  return f;
}

inline PythonFrame Py(std::string function, std::string file, int64_t line) {
  return PythonFrame{std::move(function), std::move(file), line};
}

// One rank of the classic hang: main thread in Python `py` (root first) above native `native`,
// plus an idle pool thread every rank has.
inline StackFile MakeRank(int32_t rank, int32_t world, std::vector<PythonFrame> py, std::vector<NativeFrame> native,
                          std::vector<InflightOp> ops = {}, std::string state = "S") {
  StackFile f;
  f.version = kStackFileVersion;
  f.rank = rank;
  f.world_size = world;
  f.local_rank = rank;
  f.host = "node-a";
  f.pid = 1000 + rank;
  f.reason = "hang";
  f.time = "2026-11-22T10:15:30.123Z";
  f.symbolized = true;
  f.process_state_code = "S";
  f.process_state_name = "sleeping";
  f.inflight_ops = std::move(ops);
  StackThread& main = f.threads.emplace_back();
  main.tid = f.pid;
  main.name = "python3";
  main.main = true;
  main.holds_gil = false;
  main.state = std::move(state);
  main.python = std::move(py);
  main.native = std::move(native);
  StackThread& pool = f.threads.emplace_back();
  pool.tid = f.pid + 1;
  pool.name = "pool";
  pool.state = "S";
  pool.native = {Native("clone3", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
                 Native("start_thread", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
                 Native("pthread_cond_wait", "/usr/lib/x86_64-linux-gnu/libc.so.6")};
  return f;
}

inline InflightOp Collective(std::string comm, int64_t seq, int64_t comm_size, std::string name = "ncclAllReduce") {
  InflightOp o;
  o.name = std::move(name);
  o.kind = "collective";
  o.stream = "0x5581a0c0";
  o.comm = std::move(comm);
  o.comm_size = comm_size;
  o.seq = seq;
  o.bytes = 1 << 20;
  o.state = "running";
  o.in_flight_s = 300;
  return o;
}

// A 4-rank hang: ranks 0, 1, 3 wait in ncclAllReduce #1234, rank 2 sleeps in
// load_batch.
inline std::vector<StackFile> HangOf4() {
  std::vector<StackFile> files;
  for (int32_t r = 0; r < 4; ++r) {
    if (r == 2) {
      files.push_back(MakeRank(
          r, 4, {Py("<module>", "train.py", 160), Py("train_step", "train.py", 140), Py("load_batch", "train.py", 88)},
          {Native("_start", "/usr/bin/python3.11"), Native("_PyEval_EvalFrameDefault", "/usr/bin/python3.11"),
           Native("clock_nanosleep", "/usr/lib/x86_64-linux-gnu/libc.so.6")}));
    } else {
      files.push_back(
          MakeRank(r, 4,
                   {Py("<module>", "train.py", 160), Py("train_step", "train.py", 142),
                    Py("all_reduce", "torch/distributed/distributed_c10d.py", 2050)},
                   {Native("_start", "/usr/bin/python3.11"), Native("_PyEval_EvalFrameDefault", "/usr/bin/python3.11"),
                    Native("c10d::ProcessGroupNCCL::allreduce"), Native("ncclAllReduce", "/usr/lib/libnccl.so.2")},
                   {Collective("3a9f0c12", 1234, 4)}));
    }
  }
  return files;
}

}  // namespace xtimer::testing
