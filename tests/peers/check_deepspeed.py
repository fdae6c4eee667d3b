"""check_frameworks.py deepspeed: deepspeed_worker.py under xtimer_run, 2 ranks, ZeRO-3 then
ZeRO-2 on the CPU; rank 1 dies right after the memory save of ZeRO-2's step 5 (persist-on-failure
off, so that step is only in memory), one restart.

Checks: the restart resumes ZeRO-2 at step 5 and ZeRO-3 at step 6 with the state saved then
(this rank's fp32 partition and the whole model, byte for byte), from memory: DeepSpeed's files
on disk are of step 3 and no snapshot was persisted; DeepSpeed's own loader reads our final DISK
saves (the same bytes); and DeepSpeed's zero_to_fp32.py, run on them, gives the model the run
ended with.
"""
import glob
import os
import subprocess

from checks import check
from peers import base_env, run

STEPS, CRASH_AT = 6, 5


def rows(path):
    import json

    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except OSError:
        return []


def scenarios(args, peers, out, xtimer_run):
    ckpt = os.path.join(out, "ckpt")
    env = base_env(
        out,
        args.pypath,
        XTIMER_PYTHON=peers.python,
        CKPT_DIR=ckpt,
        XTIMER_CKPT_SHM_DIR=os.path.join(out, "shm"),
        XTIMER_CKPT_PERSIST_ON_FAILURE="0",
        STEPS=str(STEPS),
        DISK_AT="3",
        CRASH_AT=str(CRASH_AT),
        STAGES="3,2",
        DS_ACCELERATOR="cpu",
    )
    os.makedirs(env["XTIMER_CKPT_SHM_DIR"])
    here = os.path.dirname(os.path.abspath(__file__))
    rc, _, _ = run(xtimer_run(args, 2, os.path.join(here, "deepspeed_worker.py"), restarts=1), env, out, "run", 400)
    check(rc == 0, f"the run ends with exit 0 after one restart ({rc})")
    saves, loads, reloads = (rows(os.path.join(out, f"{n}.jsonl")) for n in ("saves", "loads", "reloads"))
    saved = {(r["stage"], r["rank"], r["step"], r["restart"]): r["digest"] for r in saves}
    finals = {(r["stage"], r["rank"]): r["digest"] for r in saves if r.get("final")}
    check(
        not glob.glob(os.path.join(ckpt, "zero*", "xtimer-flash", "[0-9]*")),
        "no snapshot was persisted (the steps resumed from lived in memory only)",
    )
    for stage, step in ((2, CRASH_AT), (3, STEPS)):
        again = sorted((r["rank"], r["step"]) for r in loads if r["restart"] == 1 and r["stage"] == stage)
        check(again == [(0, step), (1, step)], f"ZeRO-{stage}: the restart resumes at step {step} ({again})")
        for r in loads:
            if r["restart"] == 1 and r["stage"] == stage:
                check(
                    r["digest"] == saved.get((stage, r["rank"], step, 0)),
                    f"ZeRO-{stage} rank {r['rank']}: the state loaded is the one saved at step {step}, byte for byte",
                )
        for r in reloads:
            if r["restart"] == 1 and r["stage"] == stage:
                check(
                    r["step"] == STEPS and r["digest"] == finals.get((stage, r["rank"])),
                    f"ZeRO-{stage} rank {r['rank']}: DeepSpeed's own loader reads our DISK save of step {STEPS}",
                )
        # DeepSpeed's consolidation tool, on what we wrote.
        d = os.path.join(ckpt, f"zero{stage}")
        target = os.path.join(out, f"fp32_zero{stage}")
        script = os.path.join(d, "zero_to_fp32.py")
        p = subprocess.run([peers.python, script, d, target], env=env, capture_output=True, text=True, timeout=120)
        check(
            p.returncode == 0,
            f"ZeRO-{stage}: zero_to_fp32.py reads our DISK save ({p.returncode} "
            f"{p.stderr.strip().splitlines()[-1:] if p.returncode else ''})",
        )
        if p.returncode == 0:
            cmp = subprocess.run(
                [peers.python, "-c", COMPARE, target, os.path.join(out, f"final_zero{stage}.pt")],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            check(
                cmp.returncode == 0 and cmp.stdout.strip() == "same",
                f"ZeRO-{stage}: its output is the model the run ended with ({cmp.stdout.strip()}{cmp.stderr[-300:]})",
            )


# zero_to_fp32.py writes a folder of safetensors (or pytorch_model.bin) shards.
COMPARE = r"""
import glob, os, sys, torch
target, final = sys.argv[1], torch.load(sys.argv[2])
got = {}
for f in sorted(glob.glob(os.path.join(target, "*.safetensors"))):
    from safetensors.torch import load_file
    got.update(load_file(f))
for f in sorted(glob.glob(os.path.join(target, "*.bin"))):
    got.update(torch.load(f))
same = sorted(got) == sorted(final) and all(torch.equal(got[k], final[k]) for k in final)
print("same" if same else f"differs: {sorted(got)} vs {sorted(final)}")
"""
