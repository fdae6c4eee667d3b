#!/usr/bin/env python3
"""Recovery side by side, in one run: the same 2-worker job under xtimer_run, torchrun and
`dlrover-run --standalone` (each --max-restarts 3), one fault at a time, the time until both
workers train again. Prints a table and ratios (peer / ours: above 1, we recover faster).

  kill  tests/launcher/elastic_train.py (DDP, gloo, CPU, flash checkpoint every step): once rank 1
        has trained --train-s seconds, it is SIGKILLed. Training again: both ranks did a step in new
        processes. Each launcher's phases of the restart are printed (failure -> the new workers'
        scripts start -> init_process_group() done -> checkpoint loaded -> first step). xtimer_run
        runs twice: as it is (warm interpreters) and with XTIMER_WARM_START=0 (xtimer_run-fresh).
  hang  tests/launcher/elastic_hang.py on the simulated NCCL (tests/simgpu): rank 1 sleeps in its
        data loader before step 3, rank 0 waits in the allreduce. Training again: both ranks'
        first allreduce in a new round. xtimer_run finds it with XTIMER_HANG_TIMEOUT=10 (a user's
        setting; the default is 300 s); torchrun and dlrover-run have nothing that sees this
        hang: each is given --hang-cap seconds and reported as not recovered.

  bench_recovery.py --peers DIR --bin BUILD/bin --pypath BUILD/lib/python --lib libpyccl.so --simgpu DIR
                    [--scenarios kill,hang] [--hang-cap 60] [--rounds 1] [--train-s 30] [--out DIR]
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from peers import base_env, dlrover_or_skip  # noqa: E402

TRAIN = os.path.join(HERE, "..", "launcher", "elastic_train.py")
HANG = os.path.join(HERE, "..", "launcher", "elastic_hang.py")
LAUNCHERS = ("xtimer_run", "torchrun", "dlrover-run")
KILL_LAUNCHERS = ("xtimer_run", "xtimer_run-fresh", "torchrun", "dlrover-run")
# torchrun 2.8 shares its rendezvous store with the workers, and a restarted gloo group reads the
# last round's addresses there and fails (pytorch/pytorch#135712): every restart would fail
# without this documented workaround. It changes nothing for the other two launchers.
RESTARTABLE = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def launcher(args, peers, name, script_args):
    if name.startswith("xtimer_run"):
        return [
            os.path.join(args.bin, "xtimer_run"),
            "--standalone",
            "--nproc-per-node",
            "2",
            "--max-restarts",
            "3",
            *script_args,
        ]
    if name == "torchrun":
        return [peers.torchrun, "--standalone", "--nproc-per-node", "2", "--max-restarts", "3", *script_args]
    return [peers.dlrover_run, "--standalone", "--nproc_per_node", "2", "--max_restarts", "3", *script_args]


def jsonl(path):
    rows = []
    try:
        with open(path, errors="replace") as f:
            for text in re.findall(r"\{[^{}]*\}", f.read()):
                try:
                    rows.append(json.loads(text))
                except ValueError:
                    pass
    except OSError:
        pass
    return rows


def wait_until(pred, timeout, step=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return None


def stop(p):
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(20)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def print_phases(name, out, steps, old, t_kill):
    """The restart's phases from elastic_train.py's events (the latest over the two ranks)."""
    new = [e for e in jsonl(os.path.join(out, "events.jsonl")) if e.get("started", 0) > t_kill]
    first = {}
    for r in jsonl(steps):
        if r["pid"] not in old and r["t"] > t_kill:
            first[r["rank"]] = min(first.get(r["rank"], r["t"]), r["t"])
    if len(new) < 2 or len(first) < 2:
        return
    started = max(e["started"] for e in new)
    initialized = max(e["initialized"] for e in new)
    loaded = max(e["loaded"] for e in new)
    print(
        f"phases {name}: failure -> scripts start {started - t_kill:.2f} s, -> init_process_group() done "
        f"{initialized - started:.2f} s, -> checkpoint loaded {loaded - initialized:.2f} s, -> first step "
        f"{max(first.values()) - loaded:.2f} s",
        flush=True,
    )


def kill_scenario(args, peers, name, out):
    """Seconds from SIGKILL of rank 1 until both ranks stepped in new processes, or None."""
    env = base_env(
        out,
        args.pypath,
        XTIMER_PYTHON=peers.python,
        STEPS="100000",
        STEP_S="0.1",
        **RESTARTABLE,
        XTIMER_CKPT_SHM_DIR=os.path.join(out, "shm"),
    )
    if name == "xtimer_run-fresh":
        env["XTIMER_WARM_START"] = "0"
    os.makedirs(env["XTIMER_CKPT_SHM_DIR"], exist_ok=True)
    log = open(os.path.join(out, "launcher.log"), "w")
    p = subprocess.Popen(
        launcher(args, peers, name, [TRAIN]), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    steps = os.path.join(out, "steps.jsonl")
    try:

        def trained():
            mine = [r["t"] for r in jsonl(steps) if r["rank"] == 1]
            return len(mine) >= 10 and max(mine) - min(mine) >= args.train_s

        if not wait_until(trained, 180 + args.train_s):
            return None, "never trained"
        old = {r["pid"] for r in jsonl(steps)}
        victim = max(r["pid"] for r in jsonl(steps) if r["rank"] == 1)
        os.kill(victim, signal.SIGKILL)
        t_kill = time.time()

        def again():
            firsts = {}
            for r in jsonl(steps):
                if r["pid"] not in old and r["t"] > t_kill:
                    firsts[r["rank"]] = min(firsts.get(r["rank"], r["t"]), r["t"])
            return max(firsts.values()) if len(firsts) == 2 else None

        t = wait_until(again, 180)
        if t:
            print_phases(name, out, steps, old, t_kill)
        return (t - t_kill, "") if t else (None, "no new step within 180 s")
    finally:
        stop(p)


def hang_scenario(args, peers, name, out):
    """Seconds from the hang (rank 0 entered the allreduce rank 1 never joins) until both ranks'
    first allreduce in a new round, or None after --hang-cap seconds."""
    env = base_env(
        out,
        args.pypath,
        XTIMER_PYTHON=peers.python,
        LD_LIBRARY_PATH=args.simgpu,
        **RESTARTABLE,
        XTIMER_HANG_TIMEOUT="10",
        XTIMER_DUMP_WAIT="10",
        XTIMER_TIMELINE_PATH=os.path.join(out, "timeline"),
    )
    logf = os.path.join(out, "launcher.log")
    log = open(logf, "w")
    script = [HANG, args.lib, out, "--stuck-rank", "1"]
    p = subprocess.Popen(
        launcher(args, peers, name, script), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:

        def hung():
            rows = [r for r in jsonl(logf) if r.get("rank") == 0 and r.get("step") == 3 and "allreduce_at" in r]
            return rows[0]["allreduce_at"] if rows else None

        t_hang = wait_until(hung, 180)
        if not t_hang:
            return None, "never reached the hang"
        seen_before = {(r.get("rank"), r.get("allreduce_at")) for r in jsonl(logf)}

        def again():
            firsts = {}
            for r in jsonl(logf):
                if (
                    "allreduce_at" in r
                    and r["allreduce_at"] > t_hang
                    and r.get("step") == 0
                    and (r.get("rank"), r.get("allreduce_at")) not in seen_before
                ):
                    firsts[r["rank"]] = min(firsts.get(r["rank"], r["allreduce_at"]), r["allreduce_at"])
            return max(firsts.values()) if len(firsts) == 2 else None

        t = wait_until(again, args.hang_cap)
        return (t - t_hang, "") if t else (None, f"not training again after {args.hang_cap:.0f} s")
    finally:
        stop(p)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--pypath", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--simgpu", required=True)
    ap.add_argument("--scenarios", default="kill,hang")
    ap.add_argument("--hang-cap", type=float, default=60)
    ap.add_argument("--rounds", type=int, default=1, help="kill: rounds, the median is reported")
    ap.add_argument("--train-s", type=float, default=30, help="kill: seconds rank 1 trains before it is killed")
    ap.add_argument("--out")
    args = ap.parse_args()
    peers = dlrover_or_skip(args.peers)
    root = args.out or tempfile.mkdtemp(prefix="xtimer-peers-bench-recovery-")
    scenarios = {"kill": kill_scenario, "hang": hang_scenario}
    res = {}
    for sc in args.scenarios.split(","):
        # Rounds interleave the launchers, so that the load of a shared machine falls on all alike.
        for rnd in range(args.rounds if sc == "kill" else 1):
            for name in KILL_LAUNCHERS if sc == "kill" else LAUNCHERS:
                out = os.path.join(root, f"{sc}-{name}-{rnd}")
                os.makedirs(out, exist_ok=True)
                t, why = scenarios[sc](args, peers, name, out)
                res.setdefault((sc, name), []).append((t, why))
                print(
                    f"{sc:5s} {name:12s} round {rnd}: " + (f"{t:7.2f} s" if t is not None else f"-  ({why})"),
                    flush=True,
                )

    def median(sc, name):
        ts = [t for t, _ in res[(sc, name)] if t is not None]
        return (statistics.median(ts), "") if ts else (None, res[(sc, name)][0][1])

    ok = True
    for sc in args.scenarios.split(","):
        names = KILL_LAUNCHERS if sc == "kill" else LAUNCHERS
        ours = median(sc, "xtimer_run")[0]
        print(
            f"{sc}: "
            + ", ".join(
                f"{n} {median(sc, n)[0]:.2f} s" if median(sc, n)[0] is not None else f"{n} not recovered" for n in names
            )
            + " (median)"
        )
        if ours is None:
            print(f"FAIL {sc}: xtimer_run did not recover ({median(sc, 'xtimer_run')[1]})")
            ok = False
            continue
        for name in names[1:]:
            t, why = median(sc, name)
            print(
                f"ratio {sc} {name} / xtimer_run: "
                + (f"{t / ours:.2f}" if t is not None else f"> {args.hang_cap / ours:.1f} ({why})")
            )
    if not args.out and ok:
        shutil.rmtree(root, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
