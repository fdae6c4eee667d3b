#!/usr/bin/env python3
"""Ranks out of step, named by the node agent before any timeout (xtimer_launch over four
simulated ranks, tests/launcher/desync_rank.py). The hang timeout is far longer than the
checks wait, so only a desync verdict can pass them.

  check_desync.py CHECK --bin BUILD/bin --lib libpyccl.so --simgpu DIR
  CHECK: faults (skip, size, op, sub in turn) | healthy | abort (XTIMER_DESYNC_ACTION=abort under xtimer_run)
         | collector (two agents of two ranks each: the collector compares across nodes)
         | collector-abort (two xtimer_run nodes and a collector, XTIMER_DESYNC_ACTION=abort: both
           nodes restart on the collector's verdict)
"""
import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import check, failures, free_port, load_json, start_collector, wait_for  # noqa: E402
from node_ranks import Agents, agent_command, agent_env  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def job_env(args, out, **values):
    """The ranks' environment: the simulated runtime, a hang timeout far beyond the test's waits
    (only a desync verdict can pass), fingerprints on whatever the caller's environment says."""
    return agent_env(
        drop=("XTIMER_DESYNC",),
        LD_LIBRARY_PATH=args.simgpu,
        XTIMER_TIMELINE_PATH=os.path.join(out, "timeline"),
        XTIMER_METRICS_PORT="0",
        XTIMER_HANG_TIMEOUT="600",
        **values,
    )


def launch(args, out, fault, steps=6):
    env = job_env(args, out)
    cmd = [
        os.path.join(args.bin, "xtimer_launch"),
        sys.executable,
        os.path.join(HERE, "desync_rank.py"),
        args.lib,
        os.path.join(out, f"{fault}.nccl.id"),
        "--fault",
        fault,
        "--steps",
        str(steps),
    ]
    log = open(os.path.join(out, f"{fault}.log"), "w")
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def lines(path):
    with open(path, errors="replace") as f:
        return f.read().splitlines()


# fault -> (suspects, op of the suspect's side, op of the others, communicator size)
EXPECTED = {
    # Rank 2 skips clip_grads' all-reduce; its sync_grads all-reduce (same size) pairs with the
    # others' clip_grads, silently; the first call that differs is its gather_params all-gather
    # against the others' sync_grads all-reduce.
    "skip": ([2], "AllGather", "AllReduce", 4),
    "size": ([1], "AllReduce", "AllReduce", 4),
    "op": ([3], "AllGather", "AllReduce", 4),
    "sub": ([3], "AllReduce", "AllReduce", 2),
}


def check_faults(args):
    out = tempfile.mkdtemp(prefix="xtimer-desync-")
    for fault, (suspects, odd_op, op, comm_size) in EXPECTED.items():
        shutil.rmtree(os.path.join(out, "timeline"), ignore_errors=True)
        p = launch(args, out, fault)
        try:
            found = wait_for(lambda: glob.glob(os.path.join(out, "timeline", "desync-*", "verdict.json")), 60)
            check(bool(found), f"{fault}: a desync verdict is written (hang timeout 600 s)")
            if not found:
                continue
            t_verdict = os.path.getmtime(found[0])
            v = load_json(found[0])
            check(v.get("kind") == "desync", f"{fault}: verdict.json says kind desync ({v.get('kind')})")
            named = [s.get("rank") for s in v.get("suspects", [])]
            check(named == suspects, f"{fault}: suspects {named} are {suspects}")
            sides = v.get("sides", [])
            check(len(sides) == 2, f"{fault}: two sides ({len(sides)})")
            if len(sides) == 2:
                check(
                    sides[1]["ranks"] == suspects and sides[1]["op"] == odd_op and sides[0]["op"] == op,
                    f"{fault}: what each side called: {sides[1]['op']} by {sides[1]['ranks']}, "
                    f"{sides[0]['op']} by {sides[0]['ranks']}",
                )
            check(v.get("comm_size") == comm_size, f"{fault}: on a communicator of {comm_size} ({v.get('comm_size')})")
            if fault == "sub":
                check(
                    sorted(sides[0]["ranks"] + sides[1]["ranks"]) == [2, 3],
                    "sub: only the tensor-parallel group's members are compared",
                )
            faulted = [json.loads(x) for x in lines(os.path.join(out, f"{fault}.log")) if x.startswith("{")]
            at = [x["fault_at"] for x in faulted if "fault_at" in x]
            if at:
                print(f"  {fault}: verdict written {t_verdict - at[0]:.2f} s after the mismatched call")
            log = "\n".join(lines(os.path.join(out, f"{fault}.log")))
            check(
                f"ranks out of step on communicator {v.get('comm')}: rank {suspects[0]} called" in log,
                f"{fault}: the agent's log line names rank {suspects[0]}",
            )
            if fault in ("size", "op"):
                # Ranks hung in the mismatched call: their stacks give each side's call site.
                def with_sites():
                    w = load_json(found[0])
                    return w if w.get("where") else None

                w = wait_for(with_sites, 20) or {}
                sides = w.get("sides", [])
                check(
                    len(sides) == 2
                    and sides[1].get("site", "").startswith("sync_grads (desync_rank.py:")
                    and sides[0].get("site", "").startswith("sync_grads (desync_rank.py:")
                    and sides[0]["site"] != sides[1]["site"],
                    f"{fault}: each side's Python call site from its stacks ({[x.get('site') for x in sides]})",
                )
                check(
                    "where they are (their stacks): rank " in "\n".join(lines(os.path.join(out, f"{fault}.log"))),
                    f"{fault}: a second log line says where each side called",
                )
            if fault == "size":
                # The stacks of every rank are taken as for a hang.
                stacks = wait_for(
                    lambda: len(glob.glob(os.path.join(out, "timeline", "*.stacktrace"))) == 4 or None, 30
                )
                check(bool(stacks), "size: every rank's stacks are written")
        finally:
            stop(p)
    if not failures:
        shutil.rmtree(out, ignore_errors=True)


def check_healthy(args):
    """Collectives, a sub-communicator and grouped send/recv that agree: nothing is named."""
    out = tempfile.mkdtemp(prefix="xtimer-desync-healthy-")
    p = launch(args, out, "none", steps=12)
    try:
        code = p.wait(timeout=120)
        check(code == 0, f"the healthy job finishes ({code})")
        named = glob.glob(os.path.join(out, "timeline", "desync-*"))
        check(not named, f"no desync verdict in a healthy job ({named})")
        log = "\n".join(lines(os.path.join(out, "none.log")))
        check("out of step" not in log, "no desync line in the agent's log")
    finally:
        stop(p)
    if not failures:
        shutil.rmtree(out, ignore_errors=True)


def check_abort(args):
    """XTIMER_DESYNC_ACTION=abort under xtimer_run: the desync restarts the workers, and the second
    round (without the fault) finishes."""
    out = tempfile.mkdtemp(prefix="xtimer-desync-abort-")
    env = job_env(args, out, XTIMER_DUMP_WAIT="10", XTIMER_DESYNC_ACTION="abort")
    cmd = [
        os.path.join(args.bin, "xtimer_run"),
        "--nproc-per-node",
        "4",
        "--max-restarts",
        "1",
        "--no-python",
        sys.executable,
        os.path.join(HERE, "desync_rank.py"),
        args.lib,
        os.path.join(out, "nccl.id"),
        "--fault",
        "size",
    ]
    log_path = os.path.join(out, "run.log")
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        code = p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        stop(p)
    text = "\n".join(lines(log_path))
    check(code == 0, f"the job finishes after the desync and one restart ({code})")
    check("out of step (XTIMER_DESYNC_ACTION=abort)" in text, "xtimer_run restarts the workers for the desync")
    check(bool(glob.glob(os.path.join(out, "timeline", "desync-*", "verdict.json"))), "a desync verdict is written")
    stacks = glob.glob(os.path.join(out, "timeline", "*.stacktrace"))
    check(len(stacks) == 4, f"every rank's stacks were written before the restart ({len(stacks)})")
    done = [x for x in lines(log_path) if '"done"' in x]
    check(len(done) >= 4, f"the four ranks finish in the second round ({len(done)})")
    if not failures:
        shutil.rmtree(out, ignore_errors=True)


def two_nodes(args, out, col_port, fault, steps=6):
    """Two agents (xtimer_launch) of two ranks each, reporting to the collector on `col_port`."""
    job = Agents()
    for node in range(2):
        env = job_env(args, out, XTIMER_COLLECTOR=f"127.0.0.1:{col_port}")
        env["XTIMER_TIMELINE_PATH"] = os.path.join(out, f"{fault}-node{node}")
        rank_argv = [os.path.join(HERE, "desync_rank.py"), args.lib, os.path.join(out, f"{fault}.nccl.id")]
        cmd = agent_command(args.bin, 2, node, 4, rank_argv + ["--fault", fault, "--steps", str(steps)])
        job.spawn(cmd, env, os.path.join(out, f"{fault}-node{node}.log"))
    return job


def check_collector(args):
    """Ranks on two nodes (0-1, 2-3), each fault of EXPECTED in turn with a collector of its own:
    the collector's verdict names the same suspects and calls as one agent's would (for "op",
    rank 3 on node 1 all-gathers where ranks 0-2 on both nodes all-reduce: only the collector
    sees the majority), its log names the rank, and it takes every rank's stacks; a healthy
    two-node run names nothing."""
    out = tempfile.mkdtemp(prefix="xtimer-desync-collector-")
    for fault, (suspects, odd_op, op, comm_size) in EXPECTED.items():
        fault_out = os.path.join(out, fault)
        os.makedirs(fault_out)
        port, http = free_port(), free_port()
        col = start_collector(args.bin, fault_out, port, http)
        collected = os.path.join(fault_out, "collected")
        try:
            job = two_nodes(args, fault_out, port, fault)
            try:
                found = wait_for(lambda: glob.glob(os.path.join(collected, "desync-*", "verdict.json")), 60)
                check(bool(found), f"{fault}: the collector writes a desync verdict (hang timeout 600 s)")
                if not found:
                    continue
                v = load_json(found[0])
                check(v.get("kind") == "desync", f"{fault}: collector verdict.json says kind desync ({v.get('kind')})")
                named = [x.get("rank") for x in v.get("suspects", [])]
                check(named == suspects, f"{fault}: the collector names {suspects} ({named})")
                sides = v.get("sides", [])
                check(
                    len(sides) == 2
                    and sides[1]["ranks"] == suspects
                    and sides[1]["op"] == odd_op
                    and sides[0]["op"] == op,
                    f"{fault}: both sides across the nodes: {[(x.get('ranks'), x.get('op')) for x in sides]}",
                )
                check(
                    v.get("comm_size") == comm_size, f"{fault}: on a communicator of {comm_size} ({v.get('comm_size')})"
                )
                log = "\n".join(lines(os.path.join(fault_out, "collector.log")))
                check(
                    f"ranks out of step on communicator {v.get('comm')}: rank {suspects[0]} called" in log,
                    f"{fault}: the collector's log line names rank {suspects[0]}",
                )
                if fault != "op":
                    continue
                # Every rank's stacks, as for a hang: a dump round of the collector.
                stacks = wait_for(
                    lambda: [
                        d
                        for d in glob.glob(os.path.join(collected, "*", "verdict.json"))
                        if "/desync-" not in d and len(glob.glob(os.path.join(os.path.dirname(d), "*.stacktrace"))) == 4
                    ]
                    or None,
                    40,
                )
                check(bool(stacks), "op: the collector's dump round has every rank's stacks")
            finally:
                job.kill()
        finally:
            col.kill()
            col.wait()
    # A healthy two-node job, with a collector of its own: nothing is named.
    healthy_out = os.path.join(out, "healthy")
    os.makedirs(healthy_out)
    port, http = free_port(), free_port()
    col = start_collector(args.bin, healthy_out, port, http)
    try:
        healthy = two_nodes(args, healthy_out, port, "none", steps=12)
        try:
            codes = healthy.wait(timeout=120)
            check(codes == [0, 0], f"the healthy two-node job finishes ({codes})")
        finally:
            healthy.kill()
        named = glob.glob(os.path.join(healthy_out, "collected", "desync-*"))
        check(not named, f"no desync verdict from the collector in a healthy two-node job ({named})")
        log = "\n".join(lines(os.path.join(healthy_out, "collector.log")))
        check("out of step" not in log, "no desync line in the collector's log")
    finally:
        col.kill()
        col.wait()
    if not failures:
        shutil.rmtree(out, ignore_errors=True)


def check_collector_abort(args):
    """Two static xtimer_run nodes of two ranks each, a collector, XTIMER_DESYNC_ACTION=abort:
    rank 3 (node 1) all-gathers where ranks 0-2 all-reduce. Node 0's ranks agree with each other,
    so only the collector's verdict can make node 0 restart; both nodes restart their workers,
    and the second round (without the fault) finishes on both."""
    out = tempfile.mkdtemp(prefix="xtimer-desync-collector-abort-")
    port, http = free_port(), free_port()
    col = start_collector(args.bin, out, port, http)
    master = str(free_port())
    nodes = []
    try:
        for node in range(2):
            env = job_env(
                args, out, XTIMER_COLLECTOR=f"127.0.0.1:{port}", XTIMER_DUMP_WAIT="10", XTIMER_DESYNC_ACTION="abort"
            )
            env["XTIMER_TIMELINE_PATH"] = os.path.join(out, f"node{node}")
            cmd = [
                os.path.join(args.bin, "xtimer_run"),
                "--nnodes", "2", "--node-rank", str(node), "--master-addr", "127.0.0.1", "--master-port", master,
                "--nproc-per-node", "2", "--max-restarts", "1", "--no-python",
                sys.executable, os.path.join(HERE, "desync_rank.py"), args.lib, os.path.join(out, "nccl.id"),
                "--fault", "op",
            ]  # fmt: skip
            log = open(os.path.join(out, f"node{node}.log"), "w")
            nodes.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        codes = []
        for p in nodes:
            try:
                codes.append(p.wait(timeout=150))
            except subprocess.TimeoutExpired:
                codes.append(None)
    finally:
        for p in nodes:
            stop(p)
        col.kill()
        col.wait()
    logs = ["\n".join(lines(os.path.join(out, f"node{n}.log"))) for n in range(2)]
    check(codes == [0, 0], f"both nodes finish after the desync and one restart ({codes})")
    check(
        bool(glob.glob(os.path.join(out, "collected", "desync-*", "verdict.json"))),
        "the collector wrote a desync verdict",
    )
    check(
        "the collector found ranks out of step" in logs[0] and "out of step (XTIMER_DESYNC_ACTION=abort)" in logs[0],
        "node 0, whose ranks agree, restarts its workers on the collector's verdict",
    )
    check("out of step (XTIMER_DESYNC_ACTION=abort)" in logs[1], "node 1 restarts its workers for the desync")
    done = [x for text in logs for x in text.splitlines() if '"done"' in x]
    check(len(done) >= 4, f"the four ranks finish in the second round ({len(done)})")
    if failures:
        for n, text in enumerate(logs):
            print(f"--- node {n}\n" + "\n".join(text.splitlines()[-25:]))
    else:
        shutil.rmtree(out, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check")
    ap.add_argument("--bin", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--simgpu", required=True)
    args = ap.parse_args()
    {
        "faults": check_faults,
        "healthy": check_healthy,
        "abort": check_abort,
        "collector": check_collector,
        "collector-abort": check_collector_abort,
    }[args.check](args)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
