#!/usr/bin/env python3
"""The framework checkpointers (xtimer.ckpt.hf_trainer, xtimer.ckpt.deepspeed) with the real
frameworks from the peer environment, 2 ranks over gloo on the CPU under xtimer_run.

  check_frameworks.py hf-trainer --peers DIR --bin BUILD/bin --pypath BUILD/lib/python
  check_frameworks.py deepspeed  --peers DIR --bin BUILD/bin --pypath BUILD/lib/python

hf-trainer: hf_trainer_worker.py (a tiny GPT-2 under FlashCkptTrainer, every step into memory,
every 5th persisted) crashes on one rank right after the memory save of step 8, with the saver's
persist-on-failure off, so that step is in memory only; the restart resumes at step 8 with the
parameters saved then, byte for byte, and runs to the end.

deepspeed: see deepspeed_worker.py.
"""
import argparse
import glob
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from checks import check, failures  # noqa: E402
from peers import base_env, peers_or_skip, rows, run, SKIP  # noqa: E402

NEEDS = {"hf-trainer": ["transformers", "accelerate"], "deepspeed": ["deepspeed"]}


def packages_or_skip(peers, names):
    """Exit 77 with one line when the peer environment predates these packages."""
    site = glob.glob(os.path.join(peers.path, "lib", "python3*", "site-packages"))
    for name in names:
        if not site or not os.path.isdir(os.path.join(site[0], name)):
            print(
                f"SKIP: {name} is not in the peer environment {peers.path}: run scripts/setup_peers.sh "
                "(its pins include it)"
            )
            sys.exit(SKIP)


def xtimer_run(args, nproc, script, restarts=0):
    return [
        os.path.join(args.bin, "xtimer_run"),
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        "--max-restarts",
        str(restarts),
        script,
    ]


def hf_trainer(args, peers, out):
    env = base_env(
        out,
        args.pypath,
        XTIMER_PYTHON=peers.python,
        CKPT_DIR=os.path.join(out, "ckpt"),
        XTIMER_CKPT_SHM_DIR=os.path.join(out, "shm"),
        XTIMER_CKPT_PERSIST_ON_FAILURE="0",
        STEPS="12",
        SAVE_STEPS="5",
        CRASH_AT="8",
        CRASH_RANK="1",
    )
    os.makedirs(env["XTIMER_CKPT_SHM_DIR"])
    rc, _, _ = run(xtimer_run(args, 2, os.path.join(HERE, "hf_trainer_worker.py"), restarts=1), env, out, "run", 400)
    check(rc == 0, f"the run ends with exit 0 after one restart ({rc})")
    saves, resumes = rows(os.path.join(out, "saves.jsonl")), rows(os.path.join(out, "resumes.jsonl"))
    first = {(r["rank"], r["step"]): r for r in saves if r["restart"] == 0}
    check(
        sorted(s for k, s in first if k == 1) == list(range(1, 9)),
        "before the crash rank 1 saved steps 1-8 (5 persisted, the others to memory only)",
    )
    failed = sorted(k for k, r in first.items() if not r["ok"])
    check(not failed, f"every save before the crash was taken (skipped: {failed})")
    on_disk = sorted(
        int(os.path.basename(d))
        for d in glob.glob(os.path.join(out, "ckpt", "[0-9]*"))
        if os.path.basename(d).isdigit()
    )
    check(5 in on_disk and 8 not in on_disk, f"step 8 never reached the disk, step 5 did (steps on disk {on_disk})")
    again = sorted((r["rank"], r["resumed"], r["global_step"]) for r in resumes if r["restart"] == 1)
    check(again == [(0, 8, 8), (1, 8, 8)], f"both ranks resume at step 8, the newest memory snapshot ({again})")
    for r in resumes:
        if r["restart"] == 1 and (r["rank"], 8) in first:
            check(
                r["digest"] == first[(r["rank"], 8)]["digest"],
                f"rank {r['rank']}: the parameters after the resume are those saved at step 8, byte for byte",
            )
    last = sorted((r["rank"], r["step"]) for r in saves if r["restart"] == 1)
    check(last == [(k, s) for k in (0, 1) for s in range(9, 13)], f"the restart trained steps 9-12 ({last})")


def deepspeed(args, peers, out):
    import check_deepspeed  # noqa: E402  (its own file: the DeepSpeed scenarios)

    check_deepspeed.scenarios(args, peers, out, xtimer_run)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("which", choices=sorted(NEEDS))
    ap.add_argument("--peers", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--pypath", required=True)
    args = ap.parse_args()
    peers = peers_or_skip(args.peers)
    packages_or_skip(peers, NEEDS[args.which])
    out = tempfile.mkdtemp(prefix=f"xtimer-peers-{args.which}-")
    try:
        {"hf-trainer": hf_trainer, "deepspeed": deepspeed}[args.which](args, peers, out)
    finally:
        if failures:
            for name in sorted(glob.glob(os.path.join(out, "**", "*.err"), recursive=True)):
                print(f"--- {name}\n" + open(name, errors="replace").read()[-3000:])
    print(f"{len(failures)} failed" if failures else "all passed")
    if not failures:
        shutil.rmtree(out, ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
