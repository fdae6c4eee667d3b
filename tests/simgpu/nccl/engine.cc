// The data movement of a group, run by the NCCL kernel on the stream's worker thread.
//
// Every operation becomes messages on the pairwise channels (in a fixed order both sides
// derive from the same calls) plus "joins": reductions that consume the same chunk from
// several peers at once and combine it in rank order, so all ranks get identical bits.
// AllReduce is reduce-scatter to block owners followed by all-gather from them. Nothing
// completes until the peers have made the matching calls; waiting is a futex sleep.
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>

#include "common/simgpu_clock.h"
#include "common/control.h"
#include "common/simgpu_env.h"
#include "nccl/comm.h"
#include "nccl/reduce.h"

namespace simgpu::nccl {
namespace {

struct Join {
  std::vector<int> peers;  // ranks that deliver a contribution, ascending
  const char* local = nullptr;
  char* dst = nullptr;
  uint64_t bytes = 0;
  uint64_t done = 0;
  ncclDataType_t type{};
  ncclRedOp_t op{};
  int avg = 0;
  const void* scale = nullptr;  // PreMulSum scalar for the local contribution
};

struct OutMsg {
  const char* src;
  uint64_t bytes;
  uint64_t sent = 0;
  const uint64_t* ready = nullptr;  // how much of src exists yet (a join's progress); null = all
  ncclDataType_t type{};
  const void* scale = nullptr;  // PreMulSum: scale while posting
};

struct InMsg {
  char* dst = nullptr;
  uint64_t bytes;
  uint64_t got = 0;
  Join* join = nullptr;
};

struct Plan {
  explicit Plan(int n) : out(size_t(n)), in(size_t(n)) {}
  std::vector<std::deque<OutMsg>> out;
  std::vector<std::deque<InMsg>> in;
  std::vector<std::unique_ptr<Join>> joins;
  std::vector<std::unique_ptr<char[]>> temps;
  double bus_bytes = 0;
  double p2p_send = 0, p2p_recv = 0;
};

// This process' network rate: SIMGPU_CONTROL's net_gbps when a test set one, else SIMGPU_NET_GBPS.
double net_gbps() {
  static const double g = env_double("SIMGPU_NET_GBPS", 0.0);
  const Faults f = current_faults();
  return f.net_gbps >= 0 ? f.net_gbps : g;
}

class Builder {
 public:
  Builder(ncclComm& c, Plan& p) : c_(c), p_(p), n_(c.nranks), me_(c.rank) {}

  void add(const OpDesc& op) {
    const size_t esz = type_size(op.type);
    const auto* send = static_cast<const char*>(op.send);
    auto* recv = static_cast<char*>(op.recv);
    ncclRedOp_t base = op.op;
    const void* scale = nullptr;
    int avg = 0;
    if (op.op == ncclAvg) {
      base = ncclSum;
      avg = n_;
    } else if (int(op.op) >= int(ncclNumOps)) {
      scale = c_.premul[size_t(op.op) - ncclNumOps].scalar();
      base = ncclSum;
    }
    const uint64_t bytes = op.count * esz;
    switch (op.kind) {
      case Kind::AllReduce: {
        auto lo = [&](int b) { return uint64_t(op.count * size_t(b) / size_t(n_)) * esz; };
        auto sz = [&](int b) { return lo(b + 1) - lo(b); };
        Join* j = join(send + lo(me_), recv + lo(me_), sz(me_), op.type, base, avg, scale, -1);
        for (int p = 0; p < n_; ++p) {
          if (p == me_) continue;
          out(p, send + lo(p), sz(p), op.type, scale);
          in_join(p, j, sz(me_));
        }
        for (int p = 0; p < n_; ++p) {
          if (p == me_) continue;
          out(p, recv + lo(me_), sz(me_), op.type, nullptr, &j->done);
          in(p, recv + lo(p), sz(p));
        }
        p_.bus_bytes += 2.0 * (n_ - 1) / n_ * double(bytes);
        break;
      }
      case Kind::ReduceScatter: {
        Join* j = join(send + size_t(me_) * bytes, recv, bytes, op.type, base, avg, scale, -1);
        for (int p = 0; p < n_; ++p) {
          if (p == me_) continue;
          out(p, send + size_t(p) * bytes, bytes, op.type, scale);
          in_join(p, j, bytes);
        }
        p_.bus_bytes += double(n_ - 1) * double(bytes);
        break;
      }
      case Kind::Reduce:
        if (me_ == op.peer) {
          Join* j = join(send, recv, bytes, op.type, base, avg, scale, -1);
          for (int p = 0; p < n_; ++p)
            if (p != me_) in_join(p, j, bytes);
        } else {
          out(op.peer, send, bytes, op.type, scale);
        }
        p_.bus_bytes += double(bytes);
        break;
      case Kind::AllGather:
        local_copy(recv + size_t(me_) * bytes, send, bytes);
        for (int p = 0; p < n_; ++p) {
          if (p == me_) continue;
          out(p, send, bytes, op.type, nullptr);
          in(p, recv + size_t(p) * bytes, bytes);
        }
        p_.bus_bytes += double(n_ - 1) * double(bytes);
        break;
      case Kind::Broadcast:
        if (me_ == op.peer) {
          local_copy(recv, send, bytes);
          for (int p = 0; p < n_; ++p)
            if (p != me_) out(p, send, bytes, op.type, nullptr);
        } else {
          in(op.peer, recv, bytes);
        }
        p_.bus_bytes += double(bytes);
        break;
      case Kind::Gather:
        if (me_ == op.peer) {
          local_copy(recv + size_t(me_) * bytes, send, bytes);
          for (int p = 0; p < n_; ++p)
            if (p != me_) in(p, recv + size_t(p) * bytes, bytes);
        } else {
          out(op.peer, send, bytes, op.type, nullptr);
        }
        p_.bus_bytes += double(n_ - 1) * double(bytes);
        break;
      case Kind::Scatter:
        if (me_ == op.peer) {
          for (int p = 0; p < n_; ++p)
            if (p != me_) out(p, send + size_t(p) * bytes, bytes, op.type, nullptr);
          local_copy(recv, send + size_t(me_) * bytes, bytes);
        } else {
          in(op.peer, recv, bytes);
        }
        p_.bus_bytes += double(n_ - 1) * double(bytes);
        break;
      case Kind::AlltoAll: {
        const size_t total = bytes * size_t(n_);
        const char* src = send;
        if (total && send < recv + total && recv < send + total) {  // in place: keep a copy of what we send
          p_.temps.emplace_back(new char[total]);
          memcpy(p_.temps.back().get(), send, total);
          src = p_.temps.back().get();
        }
        local_copy(recv + size_t(me_) * bytes, src + size_t(me_) * bytes, bytes);
        for (int p = 0; p < n_; ++p) {
          if (p == me_) continue;
          out(p, src + size_t(p) * bytes, bytes, op.type, nullptr);
          in(p, recv + size_t(p) * bytes, bytes);
        }
        p_.bus_bytes += double(n_ - 1) * double(bytes);
        break;
      }
      case Kind::Send:
        out(op.peer, send, bytes, op.type, nullptr);
        p_.p2p_send += double(bytes);
        break;
      case Kind::Recv:
        in(op.peer, recv, bytes);
        p_.p2p_recv += double(bytes);
        break;
    }
  }

 private:
  Join* join(const char* local, char* dst, uint64_t bytes, ncclDataType_t t, ncclRedOp_t op, int avg, const void* scale,
             int) {
    auto j = std::make_unique<Join>();
    for (int p = 0; p < n_; ++p)
      if (p != me_ && bytes) j->peers.push_back(p);
    j->local = local;
    j->dst = dst;
    j->bytes = bytes;
    j->type = t;
    j->op = op;
    j->avg = avg;
    j->scale = scale;
    p_.joins.push_back(std::move(j));
    return p_.joins.back().get();
  }
  void out(int p, const char* src, uint64_t bytes, ncclDataType_t t, const void* scale,
           const uint64_t* ready = nullptr) {
    if (bytes) p_.out[size_t(p)].push_back(OutMsg{src, bytes, 0, ready, t, scale});
  }
  void in(int p, char* dst, uint64_t bytes) {
    if (bytes) p_.in[size_t(p)].push_back(InMsg{dst, bytes, 0, nullptr});
  }
  void in_join(int p, Join* j, uint64_t bytes) {
    if (bytes) p_.in[size_t(p)].push_back(InMsg{nullptr, bytes, 0, j});
  }
  static void local_copy(char* dst, const char* src, uint64_t bytes) {
    if (bytes && dst != src) memmove(dst, src, bytes);
  }

  ncclComm& c_;
  Plan& p_;
  int n_, me_;
};

// A peer's message does not fit the call we are in: it made another call at this point of the
// communicator's order (another size, another operation). Real NCCL matches calls by order and
// never checks: such calls hang or corrupt memory. The simulation hangs, as visibly as a missing
// rank (asleep in simnccl_wait_for_peers), until the communicator is aborted.
ncclResult_t mismatch_hangs(ncclComm& c, int peer, const SlotMeta& meta, uint64_t want_bytes, uint64_t want_off) {
  set_last_error(
      "rank %d: message from rank %d has %llu bytes at offset %llu, expected %llu at %llu "
      "(mismatched collectives or send/recv sizes)",
      c.rank, peer, (unsigned long long)meta.msg_bytes, (unsigned long long)meta.offset, (unsigned long long)want_bytes,
      (unsigned long long)want_off);
  log("nccl: rank %d: mismatched message from rank %d; waiting, as NCCL would, until the communicator is aborted",
      c.rank, peer);
  RankSlot* mine = c.seg->rank(c.rank);
  while (!c.aborted()) simnccl_wait_for_peers(&mine->doorbell, mine->doorbell.load(std::memory_order_acquire), 100);
  set_last_error("rank %d: communicator aborted while an operation was waiting for its peers", c.rank);
  return ncclRemoteError;
}

ncclResult_t run(ncclComm& c, Plan& plan) {
  Segment& seg = *c.seg;
  const int n = c.nranks, me = c.rank;
  const uint64_t chunk = seg.chunk();
  RankSlot* mine = seg.rank(me);
  const int64_t t0 = now_ns();
  int64_t latest_start = t0;
  // Publish our network rate; the transfer goes at the slowest rate among the ranks it
  // exchanges with (read at the end: by then every one of them has started and published).
  mine->net_mbps.store(uint32_t(std::min(net_gbps() * 1000.0, 4e9)), std::memory_order_release);
  std::vector<int> partners;
  for (int p = 0; p < n; ++p)
    if (p != me && (!plan.out[size_t(p)].empty() || !plan.in[size_t(p)].empty())) partners.push_back(p);
  if (!partners.empty() && current_faults().nccl_blackhole) {
    // SIMGPU_CONTROL's nccl_blackhole: nothing leaves or reaches this rank, as behind a dead
    // link; it and its peers wait (asleep, as for a missing rank) until the communicator aborts.
    log("nccl: rank %d: black-holed by the control file; the operation never completes", me);
    while (!c.aborted()) simnccl_wait_for_peers(&mine->doorbell, mine->doorbell.load(std::memory_order_acquire), 100);
    set_last_error("rank %d: communicator aborted while its network was black-holed", me);
    return ncclRemoteError;
  }
  std::vector<char> wake(size_t(n), 0);
  std::vector<const void*> srcs(static_cast<size_t>(n), nullptr);

  for (;;) {
    const uint32_t bell = mine->doorbell.load(std::memory_order_acquire);
    bool progress = false, pending = false;

    for (int p = 0; p < n; ++p) {  // post what peers may take
      auto& q = plan.out[size_t(p)];
      Channel* ch = seg.channel(me, p);
      while (!q.empty()) {
        OutMsg& m = q.front();
        if (m.sent == m.bytes) {
          q.pop_front();
          continue;
        }
        const uint64_t posted = ch->posted.load(std::memory_order_relaxed);
        if (posted - ch->acked.load(std::memory_order_acquire) >= 2) break;
        const uint64_t len = std::min(chunk, m.bytes - m.sent);
        if (m.ready && *m.ready < m.sent + len) break;
        const int slot = int(posted % 2);
        char* dst = seg.slot_data(me, p, slot);
        if (m.scale) scale_copy(dst, m.src + m.sent, len / type_size(m.type), m.type, m.scale);
        else memcpy(dst, m.src + m.sent, len);
        ch->meta[slot] = SlotMeta{m.bytes, m.sent, uint32_t(len), 0, t0};
        ch->posted.store(posted + 1, std::memory_order_release);
        m.sent += len;
        wake[size_t(p)] = 1;
        progress = true;
      }
      if (!q.empty()) pending = true;
    }

    for (int p = 0; p < n; ++p) {  // take plain copies
      auto& q = plan.in[size_t(p)];
      Channel* ch = seg.channel(p, me);
      while (!q.empty()) {
        InMsg& m = q.front();
        if (m.got == m.bytes) {
          q.pop_front();
          continue;
        }
        if (m.join) break;
        const uint64_t acked = ch->acked.load(std::memory_order_relaxed);
        if (ch->posted.load(std::memory_order_acquire) == acked) break;
        const int slot = int(acked % 2);
        const SlotMeta meta = ch->meta[slot];
        if (meta.msg_bytes != m.bytes || meta.offset != m.got) return mismatch_hangs(c, p, meta, m.bytes, m.got);
        memcpy(m.dst + m.got, seg.slot_data(p, me, slot), meta.len);
        latest_start = std::max(latest_start, meta.t_start);
        ch->acked.store(acked + 1, std::memory_order_release);
        m.got += meta.len;
        wake[size_t(p)] = 1;
        progress = true;
      }
      if (!q.empty()) pending = true;
    }

    for (auto& jp : plan.joins) {  // reductions: one chunk from every peer at once
      Join& j = *jp;
      while (j.done < j.bytes) {
        const size_t esz = type_size(j.type);
        if (j.peers.empty()) {
          const void* one[1] = {j.local};
          reduce(j.dst, one, 1, j.bytes / esz, j.type, j.op, j.avg, 0, j.scale);
          j.done = j.bytes;
          progress = true;
          break;
        }
        bool ready = true;
        uint32_t len = 0;
        for (int q : j.peers) {
          auto& iq = plan.in[size_t(q)];
          Channel* ch = seg.channel(q, me);
          const uint64_t acked = ch->acked.load(std::memory_order_relaxed);
          if (iq.empty() || iq.front().join != &j || ch->posted.load(std::memory_order_acquire) == acked) {
            ready = false;
            break;
          }
          const SlotMeta& meta = ch->meta[acked % 2];
          if (meta.msg_bytes != iq.front().bytes || meta.offset != j.done)
            return mismatch_hangs(c, q, meta, iq.front().bytes, j.done);
          len = meta.len;
        }
        if (!ready) break;
        int nsrc = 0, scaled = -1;
        for (int r = 0; r < n; ++r) {
          if (r == me) {
            scaled = nsrc;
            srcs[size_t(nsrc++)] = j.local + j.done;
          } else if (std::binary_search(j.peers.begin(), j.peers.end(), r)) {
            srcs[size_t(nsrc++)] = seg.slot_data(r, me, int(seg.channel(r, me)->acked.load() % 2));
          }
        }
        reduce(j.dst + j.done, srcs.data(), nsrc, len / esz, j.type, j.op, j.avg, scaled, j.scale);
        for (int q : j.peers) {
          Channel* ch = seg.channel(q, me);
          latest_start = std::max(latest_start, ch->meta[ch->acked.load() % 2].t_start);
          ch->acked.store(ch->acked.load(std::memory_order_relaxed) + 1, std::memory_order_release);
          auto& iq = plan.in[size_t(q)];
          if ((iq.front().got += len) == iq.front().bytes) iq.pop_front();
          wake[size_t(q)] = 1;
        }
        j.done += len;
        progress = true;
      }
      if (j.done < j.bytes) pending = true;
    }

    for (int p = 0; p < n; ++p) {
      if (wake[size_t(p)]) seg.ring(p);
      wake[size_t(p)] = 0;
    }
    if (!pending) break;
    if (!progress) {
      if (c.aborted()) {
        set_last_error("rank %d: communicator aborted while an operation was waiting for its peers", c.rank);
        return ncclRemoteError;
      }
      simnccl_wait_for_peers(&mine->doorbell, bell, 100);
    }
  }

  // SIMGPU_NET_GBPS (or a test's net_gbps): the op ends no earlier than its bus bytes take at
  // the slowest partner's rate, counted from when the last participant started. A slow node
  // thus slows every collective of its communicators on every member, as a ring does.
  uint32_t mbps = mine->net_mbps.load(std::memory_order_acquire);
  for (int p : partners) {
    const uint32_t theirs = seg.rank(p)->net_mbps.load(std::memory_order_acquire);
    if (theirs > 0 && (mbps == 0 || theirs < mbps)) mbps = theirs;
  }
  if (mbps > 0) {
    const double bytes = plan.bus_bytes + std::max(plan.p2p_send, plan.p2p_recv);
    sleep_until_ns(latest_start + int64_t(bytes / (mbps / 1000.0)));  // bytes / (GB/s) = ns
  }
  return ncclSuccess;
}

}  // namespace

ncclResult_t execute(ncclComm& c, const std::vector<OpDesc>& ops) {
  if (c.aborted()) return ncclRemoteError;
  Plan plan(c.nranks);
  Builder b(c, plan);
  for (const OpDesc& op : ops) b.add(op);
  return run(c, plan);
}

}  // namespace simgpu::nccl
