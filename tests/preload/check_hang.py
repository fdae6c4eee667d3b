#!/usr/bin/env python3
"""The 4-rank hang check on the simulated runtime.

Four real CPython ranks (hang_rank.py) under xtimer_launch with XTIMER_HANG_TIMEOUT=2; rank 2
sleeps in load_batch before its allreduce. Ranks 0, 1, 3 must detect the hang within
5 timeouts and write stack files whose Python frames hold all_reduce_grads and whose native
frames hold the NCCL wait; rank 2, asked by the dump signal, must write one holding load_batch.

  check_hang.py --bin BUILD/bin --lib libpyccl.so --simgpu DIR
"""
import argparse
import datetime
import re
import os
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import check, failures, load_json, wait_for  # noqa: E402

import hang_job  # noqa: E402  (tests/preload)

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD, STUCK, STUCK_STEP, TIMEOUT = 4, 2, 3, 2.0


def wall(iso):
    return datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()


def python_functions(thread):
    return [f["function"] for f in thread.get("python", [])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--simgpu", required=True)
    args = ap.parse_args()
    out = tempfile.mkdtemp(prefix="xtimer-hang-")
    timeline = os.path.join(out, "timeline")
    procs, entered = [], {}

    def on_message(msg):
        if msg.get("step") == STUCK_STEP:
            entered[msg["rank"]] = msg["allreduce_at"]

    try:
        for r in range(WORLD):
            env = dict(
                os.environ,
                LD_LIBRARY_PATH=args.simgpu,
                XTIMER_TIMELINE_PATH=timeline,
                XTIMER_HANG_TIMEOUT=str(TIMEOUT),
                XTIMER_METRICS_PORT="0",
                RANK=str(r),
                WORLD_SIZE=str(WORLD),
                LOCAL_RANK=str(r),
            )
            env.pop("LD_PRELOAD", None)
            p = hang_job.start_rank(args, out, env, r, WORLD, STUCK, STUCK_STEP, on_message)
            procs.append(p)

        def stack(r):
            return load_json(os.path.join(timeline, f"{r:05d}-{WORLD:05d}.stacktrace"))

        waiting = [r for r in range(WORLD) if r != STUCK]
        got = wait_for(lambda: all(stack(r) for r in waiting), 20)
        check(bool(got), f"ranks {waiting} wrote stack files on their own")
        for r in waiting:
            s = stack(r)
            if not s:
                continue
            check(
                s["reason"] == "hang" and s["rank"] == r and s["world_size"] == WORLD,
                f"rank {r}: reason hang, rank/world from RANK/WORLD_SIZE",
            )
            if r in entered:
                # At the timeout, with a margin (5 timeouts) no scheduler delay reaches and a
                # watchdog late by a multiple of its timeout still exceeds.
                delay = wall(s["time"]) - entered[r]
                check(
                    delay <= 5 * TIMEOUT,
                    f"rank {r}: detected {delay:.2f} s after entering the allreduce "
                    f"(timeout {TIMEOUT} s, limit {5 * TIMEOUT} s)",
                )
            else:
                check(False, f"rank {r}: its allreduce of step {STUCK_STEP} was seen")
            ops = [o for o in s["inflight_ops"] if o["name"] == "ncclAllReduce"]
            check(
                any(o["state"] == "running" and o["seq"] == STUCK_STEP + 1 and o["comm_size"] == WORLD for o in ops),
                f"rank {r}: in-flight ncclAllReduce #{STUCK_STEP + 1} running "
                f"({[(o['seq'], o['state']) for o in ops]})",
            )
            check(
                any(o["kind"] == "sync" and o["name"] == "cudaStreamSynchronize" for o in s["inflight_ops"]),
                f"rank {r}: the host thread blocked in cudaStreamSynchronize is listed",
            )
            main = [t for t in s["threads"] if t.get("main")]
            check(
                main and python_functions(main[0])[-3:] == ["main", "train_step", "all_reduce_grads"],
                f"rank {r}: main thread's Python stack ends in train_step -> all_reduce_grads "
                f"({python_functions(main[0]) if main else None})",
            )
            check(
                "trigger" in s and "ncclAllReduce" in s["trigger"] or "cudaStreamSynchronize" in s.get("trigger", ""),
                f"rank {r}: trigger says what was stuck: {s.get('trigger')!r}",
            )

        check(stack(STUCK) is None, f"rank {STUCK} (not stuck in CUDA) did not dump on its own")
        os.kill(procs[STUCK].pid, signal.SIGUSR2)  # XTIMER_DUMP_SIGNAL default
        s = wait_for(lambda: stack(STUCK), 10)
        check(s is not None and s["reason"] == "signal", f"rank {STUCK}: dumped on SIGUSR2 (reason signal)")
        if s:
            main = [t for t in s["threads"] if t.get("main")]
            fns = python_functions(main[0]) if main else []
            check(fns[-2:] == ["train_step", "load_batch"], f"rank {STUCK}: Python stack shows load_batch ({fns})")
            check(
                not any(o["name"] == "ncclAllReduce" for o in s["inflight_ops"]),
                f"rank {STUCK}: no allreduce in flight (it never called it)",
            )

        # Symbolised by xtimer_symbolize in the background: the NCCL wait must be named.
        sym = wait_for(lambda: (stack(0) or {}).get("symbolized") and stack(0), 30)
        check(bool(sym), "rank 0's stack file was symbolised")
        if sym:
            natives = [f.get("function", "") for t in sym["threads"] for f in t["native"]]
            check(any("simnccl_wait_for_peers" in f for f in natives), "native frames hold the NCCL wait")
            check(any("cudaStreamSynchronize" in f for f in natives), "native frames hold cudaStreamSynchronize")

        # The viewer merges these real stack files (end to end).
        merged = os.path.join(out, "merged")
        p = subprocess.run(
            [os.path.join(args.bin, "xtimer_stacktrace_viewer"), "--path", timeline, "--out", merged],
            capture_output=True,
            text=True,
            timeout=120,
        )
        check(p.returncode == 0, f"xtimer_stacktrace_viewer merged the 4 stack files: {p.stdout.strip()[:400]}")
        verdict = load_json(os.path.join(merged, "verdict.json")) or {}
        check(
            any(
                x.get("rank") == STUCK and any("load_batch" in f for f in x.get("frames", []))
                for x in verdict.get("suspects", [])
            ),
            f"verdict.json names rank {STUCK} in load_batch",
        )
        check(verdict.get("ranks_missing") == [] or verdict.get("ranks_missing") == "", "no rank missing")
        for name in ("py_stack.folded", "cpp_stack.folded"):
            lines = open(os.path.join(merged, name)).read().splitlines()
            # flamegraph.pl reads each line with ^(.*)\s+?(\d+(?:\.\d*)?)$ and splits frames on ';'.
            ok = bool(lines) and all(re.match(r"^(\S.*\S) ([1-9]\d*)$", l) and ";;" not in l for l in lines)
            check(ok, f"{name}: every line is 'frame;frame;... N' as flamegraph.pl reads it")
        py = open(os.path.join(merged, "py_stack.folded")).read()
        check(
            re.search(r"load_batch@[^;]*hang_rank\.py:\d+@2\|0-1/3", py) is not None,
            "py_stack.folded labels load_batch with stuck rank 2 and leak ranks 0-1/3",
        )
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in procs:
            p.wait()
    if failures:
        print(f"{len(failures)} check(s) failed; files kept in {out}")
        sys.exit(1)
    subprocess.run(["rm", "-rf", out])


if __name__ == "__main__":
    main()
