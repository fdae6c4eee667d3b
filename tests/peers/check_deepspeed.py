"""check_frameworks.py deepspeed: deepspeed_worker.py under xtimer_run, 2 ranks, ZeRO-3 then
ZeRO-2 on the CPU; rank 1 dies right after the DISK save of ZeRO-2's step 5, its persister
stopped before that save and killed (persist-on-failure off, so that step is only in memory and,
partly, in rank 0's files), one restart.

Checks: the restart resumes ZeRO-2 at step 5 and ZeRO-3 at step 6 with the state saved then
(this rank's fp32 partition and the whole model, byte for byte), from memory: DeepSpeed's files
on disk are of step 3 and no snapshot was persisted; DeepSpeed's own loader reads our final DISK
saves (the same bytes); and DeepSpeed's zero_to_fp32.py, run on them, gives the model the run
ended with. DISK saves are written behind the job: the DISK save of step 3 returns while the
rank's persister is stopped, with neither the rank's files nor `latest` there, and both appear
once it runs on. After the crash, `latest` still names step 3 and DeepSpeed's own loader reads
it, the state saved then byte for byte.

Then the job again at 1 rank (RESIZE=1): DeepSpeedCheckpointer loads ZeRO-3 from the 2-rank DISK
saves of step 6 through DeepSpeed's universal checkpoint, and ZeRO-2 from the 2-rank job's
shared-memory snapshots of step 7 (a memory-only save after the last DISK save; written out in
DeepSpeed's layout and converted the same way); the fp32 master weights and both Adam moments
of every parameter, gathered by DeepSpeed, are the 2-rank run's at that step byte for byte (and
Adam's step count), ZeRO-3's master weights also zero_to_fp32.py's output; and the job trains on.
"""
import glob
import os
import subprocess
import time

from checks import check
from peers import base_env, rows, run

STEPS, CRASH_AT = 6, 5


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
    worker = os.path.join(here, "deepspeed_worker.py")
    rc, _, _ = run(xtimer_run(args, 2, worker, restarts=1), env, out, "run", 400)
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
    behind_the_job(out, ckpt)
    resize(args, peers, out, xtimer_run, env, worker)


def behind_the_job(out, ckpt):
    """DISK saves are written by the persisters, after the call, and a persister killed before
    it wrote a step leaves `latest` at the previous complete one."""
    for r in rows(os.path.join(out, "behind.jsonl")):
        what = f"ZeRO-{r['stage']} rank {r['rank']}, step {r['step']}"
        check(
            r["during"] == [False, False],
            f"{what}: the DISK save returned before its files and `latest` were written ({r['during']})",
        )
        check(r["after"] == [True, True], f"{what}: then its persister wrote them ({r['after']})")
    stages = sorted({(r["stage"], r["rank"]) for r in rows(os.path.join(out, "behind.jsonl"))})
    check(stages == [(2, 0), (2, 1), (3, 0), (3, 1)], f"both stages, both ranks saved behind the job ({stages})")
    saved = {
        (r["stage"], r["rank"], r["step"], r["restart"]): r["digest"] for r in rows(os.path.join(out, "saves.jsonl"))
    }
    loads = rows(os.path.join(out, "disk_loads.jsonl"))
    check(len(loads) == 2, f"after the crash, both ranks read the files on disk with DeepSpeed's loader ({len(loads)})")
    for r in loads:
        check(
            r["latest"] == "global_step3" and r["step"] == 3 and r["digest"] == saved.get((2, r["rank"], 3, 0)),
            f"ZeRO-2 rank {r['rank']}: rank 1's persister killed before it wrote step {CRASH_AT}, `latest` still "
            f"names step 3 ({r['latest']}) and DeepSpeed loads its state byte for byte (step {r['step']})",
        )
    check(
        not os.path.exists(
            os.path.join(ckpt, "zero2", f"global_step{CRASH_AT}", "zero_pp_rank_1_mp_rank_00_optim_states.pt")
        ),
        f"rank 1's files of step {CRASH_AT} were never written",
    )


def resize(args, peers, out, xtimer_run, env, worker):
    """The job again at 1 rank, from the 2-rank DISK saves of step STEPS."""
    began = time.monotonic()
    rc, _, _ = run(xtimer_run(args, 1, worker), dict(env, RESIZE="1"), out, "resize", 300)
    print(f"the 1-rank job took {time.monotonic() - began:.1f} s")
    check(rc == 0, f"the 1-rank job ends with exit 0 ({rc})")
    ckpt = env["CKPT_DIR"]
    for stage in (2, 3):
        # ZeRO-2 (the last stage) from the memory snapshots of STEPS + 1, ZeRO-3 from the files of STEPS.
        step = STEPS + 1 if stage == 2 else STEPS
        z2f_too = ", and the weights zero_to_fp32.py's"
        where = os.path.join("xtimer-flash", f"deepspeed-{step}") if stage == 2 else ""
        loads = [r["step"] for r in rows(os.path.join(out, "loads.jsonl")) if r["world"] == 1 and r["stage"] == stage]
        check(loads == [step], f"ZeRO-{stage} at 1 rank: the job resumes at step {step} of the 2-rank run ({loads})")
        universal = os.path.join(where, f"global_step{step}_universal")
        check(
            os.path.isfile(os.path.join(ckpt, f"zero{stage}", universal, "xtimer_converted")),
            f"ZeRO-{stage}: through DeepSpeed's universal checkpoint ({universal})",
        )
        on = [r["step"] for r in rows(os.path.join(out, "saves.jsonl")) if r["world"] == 1 and r["stage"] == stage]
        check(on == [step + 1], f"ZeRO-{stage} at 1 rank: trains and saves step {step + 1} ({on})")
        cmp = subprocess.run(
            [
                peers.python,
                "-c",
                COMPARE_RESIZED,
                os.path.join(out, f"resized_zero{stage}.pt"),
                os.path.join(out, f"{'memory' if stage == 2 else 'final'}_zero{stage}.pt"),
                os.path.join(out, f"fp32_zero{stage}") if stage == 3 else "-",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        check(
            cmp.returncode == 0 and cmp.stdout.strip() == "same",
            f"ZeRO-{stage} at 1 rank: fp32 master weights, exp_avg and exp_avg_sq of every parameter are the 2-rank "
            f"run's at step {step}, byte for byte{z2f_too if stage == 3 else ''} "
            f"({cmp.stdout.strip()}{cmp.stderr[-300:]})",
        )


# zero_to_fp32.py writes a folder of safetensors (or pytorch_model.bin) shards.
FP32 = r"""
import glob, os, sys, torch
def fp32(target):
    got = {}
    for f in sorted(glob.glob(os.path.join(target, "*.safetensors"))):
        from safetensors.torch import load_file
        got.update(load_file(f))
    for f in sorted(glob.glob(os.path.join(target, "*.bin"))):
        got.update(torch.load(f))
    return got
def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))
"""
COMPARE = (
    FP32
    + r"""
got, final = fp32(sys.argv[1]), torch.load(sys.argv[2])["module"]
ok = sorted(got) == sorted(final) and all(same(got[k], final[k]) for k in final)
print("same" if ok else f"differs: {sorted(got)} vs {sorted(final)}")
"""
)
# resized_zero<stage>.pt against the 2-rank state it resumed from and zero_to_fp32.py's output ("-": none).
COMPARE_RESIZED = (
    FP32
    + r"""
resized, final = torch.load(sys.argv[1]), torch.load(sys.argv[2])
z2f = fp32(sys.argv[3]) if sys.argv[3] != "-" else {n: t[0] for n, t in final["full"].items()}
bad = [n for n in final["full"] if not all(same(a, b) for a, b in zip(resized["full"].get(n, []), final["full"][n]))
       or len(resized["full"].get(n, [])) != 3]
bad += [f"{n} (module)" for n in final["module"] if not same(resized["module"][n], final["module"][n])]
bad += [f"{n} (zero_to_fp32)" for n in z2f if not same(resized["full"][n][0], z2f[n])]
bad += [] if resized["adam_steps"] == final["adam_steps"] else [f"Adam steps {resized['adam_steps']}"]
ok = not bad and sorted(resized["full"]) == sorted(final["full"]) == sorted(z2f)
print("same" if ok else f"differs: {bad} {sorted(resized['full'])} {sorted(z2f)}")
"""
)
