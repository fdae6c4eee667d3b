#!/usr/bin/env python3
"""Ranks that only talk: the command xtimer_launch runs in check_judge_live.py. It opens one agent
connection per rank (XTIMER_AGENT_SOCKET), says hello, and sends each rank's step records of a
simulated synchronous job once a second as `steps` messages (docs/formats.md), with no GPU and no
training. Every process simulates the whole job from the same start, so several agents' processes
agree; each sends only its own ranks' records.

  fake_steps_ranks.py --ranks 0-3 --world 8 --per-node 4 --t0 T --seconds S [--speed X]
                      [--clock-offset S] [--slow-gpu RANK:FROM:TO] [--host RANK:FROM] [--bad-message]

Times (FROM, TO) are simulated seconds after T; the simulation runs `speed` times faster than the
wall clock. A rank asked for samples ({"type": "sample"}) adds Python samples to its records for
that many wall seconds: the host straggler mostly in slow_fn, the others in train_step. Prints
one JSON line per sample request it got.
"""
import argparse
import json
import os
import socket
import sys
import time


def span(text):
    a, _, b = text.partition("-")
    return list(range(int(a), int(b or a) + 1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--per-node", type=int, required=True)
    p.add_argument("--t0", type=float, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--clock-offset", type=float, default=0.0)
    p.add_argument("--slow-gpu", default="")
    p.add_argument("--host", default="")
    p.add_argument("--bad-message", action="store_true")
    a = p.parse_args()
    mine = span(a.ranks)
    slow_gpu = [float(x) for x in a.slow_gpu.split(":")] if a.slow_gpu else None
    host = [float(x) for x in a.host.split(":")] if a.host else None

    conns = {}
    for r in mine:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(os.environ["XTIMER_AGENT_SOCKET"])
        s.setblocking(False)
        conns[r] = s
        s.send(
            json.dumps(
                {
                    "type": "hello",
                    "link": True,
                    "rank": r,
                    "world_size": a.world,
                    "local_rank": r % a.per_node,
                    "host": "fake",
                    "pid": 500000 + r,
                }
            ).encode()
        )
    if a.bad_message:
        conns[mine[0]].send(
            json.dumps(
                {
                    "type": "steps",
                    "rank": mine[0],
                    "pid": 500000 + mine[0],
                    "records": [{"v": 1, "rank": mine[0], "world": a.world, "t_begin": "soon", "t_end": 1}],
                }
            ).encode()
        )

    world = list(range(a.world))
    nodes = a.world // a.per_node
    step, begin, seq = 0, {r: a.t0 for r in world}, {}
    pending = {r: [] for r in mine}
    sampling = {}  # rank -> wall time until which it samples
    wall0 = time.time()
    next_send = wall0 + 1

    def collective(comm, members, transfer, ready, recs):
        n = seq.get(comm, 0)
        seq[comm] = n + 1
        last = max(ready[m] for m in members)
        end = last + transfer
        for m in members:
            off = a.clock_offset if m // a.per_node == 1 else 0.0
            recs[m]["colls"].append(
                {
                    "comm": comm,
                    "seq": n,
                    "op": "AllReduce",
                    "bytes": 1 << 24,
                    "ranks": len(members),
                    "call": ready[m] - 1e-4 + off,
                    "start": ready[m] + off,
                    "end": end + 1e-5 * (m % 3) + off,
                }
            )
            ready[m] = end + 1e-5 * (m % 3)

    while True:
        now = time.time()
        sim_now = a.t0 + (now - wall0) * a.speed
        if sim_now - a.t0 > a.seconds:
            break
        # Steps of the whole job up to the simulated present.
        while min(begin.values()) < sim_now:
            t = min(begin.values()) - a.t0
            ready, recs = {}, {}
            for r in world:
                gemm = 0.06 * (2.0 if slow_gpu and r == slow_gpu[0] and slow_gpu[1] <= t < slow_gpu[2] else 1.0)
                extra = 0.08 if host and r == host[0] and t >= host[1] else 0.0
                pre = 0.01 + extra
                ready[r] = begin[r] + pre + gemm + 0.01
                recs[r] = {
                    "v": 1,
                    "rank": r,
                    "world": a.world,
                    "node": "fake",
                    "pid": 500000 + r,
                    "step": step,
                    "t_begin": begin[r],
                    "gpu_idle_s": pre,
                    "issue_latency_s": 2e-5,
                    "kernels": [
                        {"sig": "GEMM bf16 4096x4096x4096", "n": 4, "s": gemm, "tflops": 0},
                        {"sig": "elementwise_kernel", "n": 20, "s": 0.01, "tflops": 0},
                    ],
                    "colls": [],
                    "gc_s": 0.0,
                    "data_s": 0.002,
                    "_host": extra,
                }
            collective("world", world, 0.015, ready, recs)
            for n in range(nodes):
                collective(f"node{n}", list(range(n * a.per_node, (n + 1) * a.per_node)), 0.004, ready, recs)
            for r in world:
                off = a.clock_offset if r // a.per_node == 1 else 0.0
                end = ready[r] + 0.001
                rec = recs[r]
                host_s = rec.pop("_host")
                rec["t_end"] = end + off
                rec["t_begin"] += off
                rec["gpu_busy_s"] = end - begin[r] - rec["gpu_idle_s"]
                if r in pending and sampling.get(r, 0) > now:
                    n_slow = round(host_s * 20)
                    n_rest = max(1, round((end - begin[r] - host_s) * 20))
                    rec["samples"] = (
                        [{"frames": "slow_fn (train.py:40);main (train.py:88)", "n": n_slow}] if n_slow else []
                    ) + [{"frames": "train_step (train.py:61);main (train.py:90)", "n": n_rest}]
                if r in pending:
                    pending[r].append(rec)
                begin[r] = end
            step += 1
        # Sample requests from the agent.
        for r, s in conns.items():
            while True:
                try:
                    msg = json.loads(s.recv(65536))
                except (BlockingIOError, ValueError):
                    break
                if msg.get("type") == "sample":
                    sampling[r] = now + float(msg.get("seconds", 10))
                    print(json.dumps({"sample": r, "seconds": msg.get("seconds"), "hz": msg.get("hz")}), flush=True)
        if now >= next_send:
            next_send += 1
            for r in mine:
                if pending[r]:
                    conns[r].send(
                        json.dumps({"type": "steps", "rank": r, "pid": 500000 + r, "records": pending[r]}).encode()
                    )
                    pending[r] = []
        time.sleep(0.02)
    return 0


if __name__ == "__main__":
    sys.exit(main())
