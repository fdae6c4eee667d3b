#!/usr/bin/env python3
"""xtimer_run's warm interpreters (launcher/run/warm_pool.h): a worker restarted in one sees what
a fresh worker sees.

Two jobs of 2 workers (tests/launcher/warm_probe.py), --max-restarts 1, rank 0 failing in round 0
so that round 1 starts both ranks again:
  script  `xtimer_run ... warm_probe.py a b`: both ranks of round 1 start in warm interpreters;
          each rank's dump of round 1 (sys.argv, sys.orig_argv, sys.path, __file__, __name__, the
          working folder, its session, every environment variable) equals its fresh dump of
          round 0 but for the round's own variables (MASTER_PORT, TORCHELASTIC_RESTART_COUNT, the
          error file's attempt_<N>) and XTIMER_RANK_PID; stdout and stderr reach the --log-dir
          files; a module no warm interpreter imported imports; a function of __main__ runs in a
          "spawn" pool and a forked process; a torch DataLoader with 2 workers iterates; the
          spawned helpers load the library and do not greet the node agent as the rank (the
          agent's debug log lists each hello: one pid per rank in round 1, the warm one); the
          simulated CUDA runtime is first called in the worker, which the library then reports as
          its rank (and no CUDA library was mapped before the script ran).
  module  `xtimer_run -m warm_probe`, run from the probe's folder: the same comparison; then
          rank 1 raises in round 1: the job fails with its traceback, which shows the probe's
          frame and none of the warm interpreter's.

  check_warm.py --bin BUILD/bin --python PYTHON --simgpu DIR --pyccl libpyccl.so [--only script|module]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from checks import check, failures  # noqa: E402
from node_ranks import agent_env  # noqa: E402

ROUND_VARIABLES = {"MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_ERROR_FILE", "XTIMER_RANK_PID"}
SAME = ("argv", "orig_argv", "path", "file", "main_file", "name", "spec", "cwd", "session_leader", "unbuffered")


def run_job(args, work, name, command, cwd, extra_env):
    out = os.path.join(work, name)
    os.makedirs(out)
    logs = os.path.join(out, "logs")
    env = agent_env(
        OUT=out,
        XTIMER_PYTHON=args.python,
        XTIMER_LOG_LEVEL="debug",
        XTIMER_WARM_DELAY="0",
        XTIMER_METRICS_PORT="0",
        LD_LIBRARY_PATH=args.simgpu,
        **extra_env,
    )
    cmd = [
        os.path.join(args.bin, "xtimer_run"),
        "--standalone",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        "1",
        "--log-dir",
        logs,
        "--redirects",
        "3",
        *command,
    ]
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=240)
    with open(os.path.join(out, "xtimer_run.err"), "w") as f:
        f.write(p.stderr)
    return p, out, logs


def load(out, rank, restart):
    try:
        with open(os.path.join(out, f"dump-{rank}-{restart}.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def compare(name, out, log, expect_cuda):
    # The warm pid of each rank, from xtimer_run's log.
    warm = {int(r): int(p) for r, p in re.findall(r"rank (\d+) started in a warm interpreter \(pid (\d+)", log)}
    check(sorted(warm) == [0, 1], f"{name}: both ranks of round 1 started in warm interpreters ({warm})")
    round1 = log[log.find("run: round 1") :]
    hellos = {}
    for r, p in re.findall(r"agent: rank (\d+) \(pid (\d+)\) said hello", round1):
        hellos.setdefault(int(r), set()).add(int(p))
    check(
        all(hellos.get(r) == {p} for r, p in warm.items()),
        f"{name}: in round 1 only the warm ranks greeted the agent, not their spawned helpers ({hellos})",
    )
    for rank in (0, 1):
        fresh, again = load(out, rank, 0), load(out, rank, 1)
        if not check(fresh is not None and again is not None, f"{name}: rank {rank} wrote both dumps"):
            continue
        diff = [k for k in SAME if fresh[k] != again[k]]
        check(not diff, f"{name}: rank {rank}: warm sees what fresh saw: {', '.join(SAME)} ({diff})")
        a, b = fresh["env"], again["env"]
        env_diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k) and k not in ROUND_VARIABLES)
        check(not env_diff, f"{name}: rank {rank}: the same environment but the round's variables ({env_diff})")
        check(
            a.get("TORCHELASTIC_ERROR_FILE", "").replace("attempt_0", "attempt_1") == b.get("TORCHELASTIC_ERROR_FILE"),
            f"{name}: rank {rank}: its error file is round 1's",
        )
        check(
            b.get("XTIMER_RANK_PID") == str(warm.get(rank)) and "XTIMER_RANK_PID" not in a,
            f"{name}: rank {rank}: XTIMER_RANK_PID is the warm pid ({b.get('XTIMER_RANK_PID')})",
        )
        x = again.get("extras", {})
        check(
            x.get("minidom_before") is False and x.get("minidom") == "1",
            f"{name}: rank {rank}: imports a module the warm one did not",
        )
        check(x.get("spawn") == [1, 4, 9], f"{name}: rank {rank}: a spawn pool runs a function of __main__")
        se = x.get("spawn_env") or [None, None]
        check(
            se[0] == str(warm.get(rank)) and se[1] != warm.get(rank),
            f"{name}: rank {rank}: its spawned helper knows it is not the rank ({se})",
        )
        check(x.get("fork_exit") == 0, f"{name}: rank {rank}: a forked process runs")
        dl = x.get("dataloader")
        check(
            dl == "no torch" or dl == [[0, 1, 2, 3], [4, 5, 6, 7]],
            f"{name}: rank {rank}: a DataLoader with 2 workers iterates ({dl}, torch {x.get('torch')})",
        )
        if expect_cuda:
            check(not again.get("cuda_before"), f"{name}: rank {rank}: no CUDA library was mapped before the script")
            check(
                x.get("pyccl_init") == 0 and x.get("pyccl_allreduce") == 0,
                f"{name}: rank {rank}: joins a simulated NCCL communicator and all-reduces",
            )
    if expect_cuda:
        link = re.findall(r"agent: rank (\d+) \(pid (\d+)\) said hello", round1)
        check(
            len(link) >= 4 and all(warm.get(int(r)) == int(p) for r, p in link),
            f"{name}: the library, started by CUDA and NCCL calls, reports each warm rank as that rank ({link})",
        )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--simgpu", required=True)
    ap.add_argument("--pyccl", required=True, help="libpyccl.so (tests/preload/pyccl.cc)")
    ap.add_argument("--only", choices=("script", "module"))
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="xtimer-warm-")
    probe = os.path.join(HERE, "warm_probe.py")
    if args.only in (None, "script"):
        p, out, logs = run_job(args, work, "script", [probe, "a", "b"], work, {"PYCCL": args.pyccl})
        check(p.returncode == 0, f"script: the job succeeded ({p.returncode})")
        compare("script", out, p.stderr, expect_cuda=True)
        for local in (0, 1):
            att = [d for d in os.listdir(logs) if os.path.isdir(os.path.join(logs, d))]
            base = os.path.join(logs, att[0], "attempt_1", str(local)) if att else ""
            text = {}
            for stream in ("stdout", "stderr"):
                try:
                    with open(os.path.join(base, f"{stream}.log")) as f:
                        text[stream] = f.read()
                except OSError:
                    text[stream] = ""
            check(
                all(f"restart 1 on {s}" in text[s] for s in ("stdout", "stderr")),
                f"script: local rank {local}'s stdout and stderr of round 1 reached the --log-dir files",
            )
    if args.only in (None, "module"):
        moddir = os.path.join(work, "mod")
        os.makedirs(moddir)
        shutil.copy(probe, os.path.join(moddir, "warm_probe.py"))
        p, out, logs = run_job(args, work, "module", ["-m", "warm_probe", "x"], moddir, {"RAISE_AT_1": "1"})
        compare("module", out, p.stderr, expect_cuda=False)
        check(p.returncode == 1, f"module: the job failed as rank 1 raised ({p.returncode})")
        tail = p.stderr[p.stderr.find("last lines of rank") :]
        check(
            "ValueError: raised on purpose" in tail and "warm_probe.py" in tail and "warm_worker" not in tail,
            f"module: the traceback shows the probe's frames, none of the warm interpreter's ({tail[:600]!r})",
        )
    if failures:
        print(f"kept {work}\n{len(failures)} check(s) failed")
        sys.exit(1)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
