// Writes the seed corpus of the collector request fuzz target (request_fuzz.cc) into a folder:
// whole conversations a real agent has (register, report, a hang, uploads for the round, ticks
// until it is merged, a round file asked for) and a few shapes around them.
//   request_fuzz_seeds DIR
#include <cstdio>
#include <fstream>
#include <string>

#include "collector.pb.h"
#include "tests/collector/request_fuzz_records.h"
#include "tests/viewer/stack_json.h"

namespace {

using namespace xtimer;
using fuzz::AppendRecord;

std::string Register(const std::string& node, int first, int n, int world, int version = 1) {
  v1::RegisterRequest req;
  req.set_protocol_version(version);
  req.set_node(node);
  req.set_agent_id("agent-" + node);
  for (int r = first; r < first + n; ++r) {
    v1::Rank* m = req.add_ranks();
    m->set_rank(r);
    m->set_local_rank(r - first);
    m->set_world_size(world);
    m->set_host(node);
    m->set_pid(1000 + r);
  }
  return req.SerializeAsString();
}

std::string Report(int first, int n, int world, int hung_rank) {
  v1::ReportRequest req;
  for (int r = first; r < first + n; ++r) {
    v1::RankReport* rr = req.add_reports();
    v1::Rank* m = rr->mutable_rank();
    m->set_rank(r);
    m->set_local_rank(r - first);
    m->set_world_size(world);
    m->set_host("node");
    m->set_pid(1000 + r);
    rr->set_time_unix_ms(1795341531000);
    rr->set_state(r == hung_rank ? v1::RANK_STATE_HUNG : v1::RANK_STATE_RUNNING);
    if (r == hung_rank) rr->set_trigger("ncclAllReduce #1234 on comm 3a9f0c12 running for 302.1 s");
    v1::OpStat* op = rr->add_ops();
    op->set_name("ncclAllReduce");
    op->set_kind("collective");
    op->set_count(100);
    op->set_p99_us(2000);
    op->set_comm("3a9f0c12");
  }
  return req.SerializeAsString();
}

std::string Upload(const StackFile& f, const std::string& dump_id) {
  v1::StackUpload u;
  u.set_dump_id(dump_id);
  u.set_rank(f.rank);
  u.set_stack_json(testing::StackFileToJson(f));
  return u.SerializeAsString();
}

// Steps of `world` ranks from `first` (n of them) at `t`: one world all-reduce each, rank
// `slow` arriving late.
std::string Steps(int first, int n, int world, int64_t step, double t, int slow) {
  v1::StepsRequest req;
  for (int r = first; r < first + n; ++r) {
    v1::StepRecord* rec = req.add_records();
    rec->set_rank(r);
    rec->set_world(world);
    rec->set_node(r < world / 2 ? "node-a" : "node-b");
    rec->set_pid(1000 + r);
    rec->set_step(step);
    rec->set_t_begin(t);
    rec->set_t_end(t + 0.2);
    rec->set_gpu_idle_s(0.02);
    v1::KernelTime* k = rec->add_kernels();
    k->set_sig("GEMM bf16 4096x4096x4096");
    k->set_n(4);
    k->set_s(r == slow ? 0.16 : 0.08);
    v1::CollTime* c = rec->add_colls();
    c->set_comm("9f3a01");
    c->set_seq(step);
    c->set_op("AllReduce");
    c->set_bytes(67108864);
    c->set_ranks(world);
    c->set_start(t + (r == slow ? 0.17 : 0.09));
    c->set_end(t + 0.19);
    if (r == slow) rec->add_samples()->set_frames("slow_fn (train.py:40);main (train.py:88)");
    if (r == slow) rec->mutable_samples(0)->set_n(3);
  }
  return req.SerializeAsString();
}

void Write(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return std::fputs("usage: request_fuzz_seeds DIR\n", stderr), 2;
  const std::string dir = argv[1];
  std::vector<StackFile> hang = testing::HangOf4();

  // One agent of 4 ranks: rank 2 hangs, every rank uploads for the round, ticks until merged.
  std::string s;
  AppendRecord(&s, fuzz::kRegister, Register("node-a", 0, 4, 4));
  AppendRecord(&s, fuzz::kReport | 0x80, Report(0, 4, 4, 2));
  for (const StackFile& f : hang) AppendRecord(&s, fuzz::kUpload, Upload(f, "@"));
  AppendRecord(&s, fuzz::kTick, "\x02");
  AppendRecord(&s, fuzz::kTick, "\x02");
  AppendRecord(&s, fuzz::kRoundFile, "/py_stack.folded");
  AppendRecord(&s, fuzz::kRoundFile, "/verdict.json");
  Write(dir, "seed-one-agent-round", s);

  // Two agents, a round that times out with rank 3 missing, then a disconnect.
  s.clear();
  AppendRecord(&s, fuzz::kRegister, Register("node-a", 0, 2, 4));
  AppendRecord(&s, fuzz::kRegister, Register("node-b", 2, 2, 4));
  AppendRecord(&s, fuzz::kReport, Report(2, 2, 4, 2));
  AppendRecord(&s, fuzz::kTick, "\x01");
  for (int r = 0; r < 3; ++r) AppendRecord(&s, fuzz::kUpload, Upload(hang[r], "@"));
  AppendRecord(&s, fuzz::kTick, "\x50");
  AppendRecord(&s, fuzz::kDisconnect, "");
  AppendRecord(&s, fuzz::kRoundFile, "/cpp_stack.speedscope.json");
  Write(dir, "seed-two-agents-timeout", s);

  // Stacks a rank dumped on its own (dump id ""), a duplicate, one for another rank.
  s.clear();
  AppendRecord(&s, fuzz::kRegister, Register("node-a", 0, 4, 4));
  AppendRecord(&s, fuzz::kReport, Report(0, 4, 4, 1));
  AppendRecord(&s, fuzz::kUpload, Upload(hang[1], ""));
  AppendRecord(&s, fuzz::kUpload, Upload(hang[1], ""));
  StackFile other = hang[0];
  other.rank = 3;
  AppendRecord(&s, fuzz::kUpload, Upload(other, "@"));
  AppendRecord(&s, fuzz::kTick, "\xff");
  Write(dir, "seed-own-dumps", s);

  // Two agents' step records, rank 1 slower, evaluated on the ticks; a bad record.
  s.clear();
  AppendRecord(&s, fuzz::kRegister, Register("node-a", 0, 2, 4));
  AppendRecord(&s, fuzz::kRegister, Register("node-b", 2, 2, 4));
  for (int step = 0; step < 40; ++step) {
    double t = 1795341531.0 + step * 0.2;
    AppendRecord(&s, fuzz::kSteps | (step % 2 ? 0x80 : 0), Steps(0, 2, 4, step, t, 1));
    AppendRecord(&s, fuzz::kSteps, Steps(2, 2, 4, step, t, 1));
    if (step % 5 == 4) AppendRecord(&s, fuzz::kTick, "\x14");
  }
  v1::StepsRequest bad;
  v1::StepRecord* rec = bad.add_records();
  rec->set_rank(7);
  rec->set_world(4);
  AppendRecord(&s, fuzz::kSteps, bad.SerializeAsString());
  AppendRecord(&s, fuzz::kTick, "\x28");
  Write(dir, "seed-steps", s);

  // Refused: another protocol version, an unknown session, a report before registering.
  s.clear();
  AppendRecord(&s, fuzz::kReport, Report(0, 1, 1, -1));
  AppendRecord(&s, fuzz::kRegister, Register("node-z", 0, 1, 1, 7));
  v1::ReportRequest unknown;
  unknown.set_session("no-such-session");
  AppendRecord(&s, fuzz::kReport, unknown.SerializeAsString());
  AppendRecord(&s, fuzz::kRoundFile, "../../etc/passwd");
  Write(dir, "seed-refused", s);

  // A world of 2^20 ranks (the largest accepted) with one rank reporting a hang.
  s.clear();
  AppendRecord(&s, fuzz::kRegister, Register("node-big", 1048575, 1, 1048576));
  AppendRecord(&s, fuzz::kReport | 0x80, Report(1048575, 1, 1048576, 1048575));
  AppendRecord(&s, fuzz::kTick, "\x40");
  Write(dir, "seed-big-world", s);
  std::printf("wrote 6 seeds to %s\n", dir.c_str());
  return 0;
}
