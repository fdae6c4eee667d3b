#include "common/rank_metrics.h"

#include <set>
#include <string>

#include "common/kinds.h"

namespace xtimer {
namespace {

bool IsCommunication(const v1::OpStat& op) {
  return IsKind(op.kind(), OpKind::kCollective) || IsKind(op.kind(), OpKind::kP2p);
}

// What tells apart classes of one op name: the shape of a matmul, size and communicator of a
// collective.
std::string Detail(const v1::OpStat& op) {
  if (!op.shape().empty()) return op.shape();
  if (IsCommunication(op)) {
    std::string d = std::to_string(op.bytes()) + "B";
    if (!op.comm().empty()) d += " comm " + op.comm();
    return d;
  }
  return "";
}

}  // namespace

void AppendRankMetrics(const std::vector<v1::RankReport>& reports, PrometheusText* out) {
  out->Family("xtimer_rank_up", "gauge", "1 while the rank's process runs, 0 once it exited");
  out->Family("xtimer_rank_hung", "gauge", "1 while the rank's watchdog reports a hang");
  out->Family("xtimer_rank_inflight_oldest_seconds", "gauge",
              "Age of the rank's oldest GPU op (or blocking sync) in flight");
  out->Family("xtimer_rank_dumps_total", "counter", "Stack dumps the rank has written");
  out->Family("xtimer_op_latency_seconds", "summary", "GPU time of one op of the class (event pair on its stream)");
  out->Family("xtimer_op_tflops", "gauge", "Matmul throughput of the class: 2*m*n*k*batch / time");
  out->Family("xtimer_op_algbw_gbps", "gauge", "NCCL algorithm bandwidth of the class (bytes / time), GB/s");
  out->Family("xtimer_op_busbw_gbps", "gauge", "NCCL bus bandwidth of the class (nccl-tests factors), GB/s");
  for (const v1::RankReport& r : reports) {
    const std::string rank = std::to_string(r.rank().rank());
    Labels who = {{"rank", rank}, {"host", r.rank().host()}};
    out->Add("xtimer_rank_up", who, r.state() == v1::RANK_STATE_EXITED ? 0 : 1);
    out->Add("xtimer_rank_hung", who, r.state() == v1::RANK_STATE_HUNG ? 1 : 0);
    out->Add("xtimer_rank_inflight_oldest_seconds", who, r.oldest_inflight_s());
    out->Add("xtimer_rank_dumps_total", "xtimer_rank_dumps_total", who, static_cast<double>(r.dumps()));
    std::set<std::string> seen;  // one series per label set, as the format requires
    for (const v1::OpStat& op : r.ops()) {
      std::string detail = Detail(op);
      std::string key = op.kind() + '\n' + op.name() + '\n' + detail;
      for (int n = 2; !seen.insert(key).second; ++n) {
        detail = Detail(op) + " #" + std::to_string(n);
        key = op.kind() + '\n' + op.name() + '\n' + detail;
      }
      Labels l = {{"rank", rank}, {"kind", op.kind()}, {"op", op.name()}, {"detail", detail}};
      Labels q50 = l, q99 = l;
      q50.emplace_back("quantile", "0.5");
      q99.emplace_back("quantile", "0.99");
      out->Add("xtimer_op_latency_seconds", q50, op.p50_us() / 1e6);
      out->Add("xtimer_op_latency_seconds", q99, op.p99_us() / 1e6);
      out->Add("xtimer_op_latency_seconds", "xtimer_op_latency_seconds_sum", l, op.total_ms() / 1e3);
      out->Add("xtimer_op_latency_seconds", "xtimer_op_latency_seconds_count", l, static_cast<double>(op.count()));
      if (IsKind(op.kind(), OpKind::kMatmul)) out->Add("xtimer_op_tflops", l, op.tflops());
      if (IsCommunication(op)) {
        out->Add("xtimer_op_algbw_gbps", l, op.algbw_gbps());
        out->Add("xtimer_op_busbw_gbps", l, op.busbw_gbps());
      }
    }
  }
}

}  // namespace xtimer
