#!/usr/bin/env python3
"""DeepSpeedCheckpointer with what it must not trust: a snapshot skeleton that would run code, a
client_state of the user's own class, FIFOs among a tag's files, a corrupt shared-memory control
file, flipped bits in a file our persister wrote, and DeepSpeed's own files (which load as
without xtimer). ds_trust_worker.py says what each case does.

  check_ds_trust.py one   --peers DIR --bin BUILD/bin --pypath BUILD/lib/python   # 1 rank
  check_ds_trust.py ranks --peers DIR --bin BUILD/bin --pypath BUILD/lib/python   # 2 ranks

Each job runs under a time limit and is killed at it (a load waiting on a FIFO fails the test
instead of hanging it; in the worker SIGALRM also ends a load after 90 s).
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from checks import check, failures, free_port  # noqa: E402
from peers import base_env, peers_or_skip, rows, SKIP  # noqa: E402


def job(peers, env, nranks, name, timeout):
    """The worker as ranks 0..nranks-1 of one job (gloo on loopback); True when every rank
    exited 0 within timeout (else they are killed)."""
    env = dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(nranks))
    out = env["OUT"]
    procs = []
    for r in range(nranks):
        with open(os.path.join(out, f"{name}.{r}.err"), "w") as log:
            procs.append(
                subprocess.Popen(
                    [peers.python, os.path.join(HERE, "ds_trust_worker.py")],
                    env=dict(env, RANK=str(r), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(nranks)),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
    rcs = []
    for p in procs:
        try:
            rcs.append(p.wait(timeout))
        except subprocess.TimeoutExpired:
            for q in procs:
                try:
                    os.killpg(q.pid, 9)
                except ProcessLookupError:
                    pass
            p.wait()
            rcs.append(None)
    check(all(rc == 0 for rc in rcs), f"{name}: every rank exits 0 within {timeout} s ({rcs})")
    return all(rc == 0 for rc in rcs)


def loaded(row):
    """(step loaded / step wanted, the error if any)."""
    return f"(step {row.get('step')} / {row.get('want')}{', ' + row['error'] if row.get('error') else ''})"


def said(row, *words):
    """One line of what xtimer.ckpt said that holds all these words."""
    return any(all(w in line for w in words) for line in row.get("log", []))


def one(args, peers, out, env):
    job(peers, dict(env, MODE="one"), 1, "one", 360)
    got = {r["case"]: r for r in rows(os.path.join(out, "one.jsonl"))}
    print("cases done at (s since the worker's imports): " + ", ".join(f"{c} {r['t']}" for c, r in got.items()))

    r = got.get("memory", {})
    check(
        r.get("same") is True and said(r, "loaded from the flash snapshot"),
        f"a real snapshot (ZeRO-2: DeepSpeed's enum, loss scaler, fragment addresses) loads from memory {loaded(r)}",
    )
    r = got.get("hostile", {})
    check(r.get("ran") is False, "hostile skeleton: the code it names did not run")
    check(r.get("same") is True and not r.get("error"), f"hostile skeleton: the DISK save loads {loaded(r)}")
    check(
        said(r, "posix.system", "loading DeepSpeed's files"),
        f"hostile skeleton: one line names posix.system ({r.get('log')})",
    )

    r = got.get("client", {})
    check(r.get("saved2") is True, "client_state of the user's class: the MEMORY save is taken")
    check(
        r.get("same") is True and r.get("thing") == 1 and not r.get("error"),
        f"client_state of the user's class: the DISK save (written by the persister) loads, with its client_state "
        f"{loaded(r)} {r.get('thing')}",
    )
    check(
        said(r, "ds_trust_thing.Thing", "loading DeepSpeed's files"),
        f"client_state of the user's class: one line names ds_trust_thing.Thing ({r.get('log')})",
    )

    for what in ("latest", "xtimer_step", "marker", "optim"):
        r = got.get("fifo-" + what, {})
        to = "the tag it named loads" if what == "latest" else "the older tag loads"
        check(
            r.get("same") is True and not r.get("error"),
            f"a FIFO as {what}: the load returns and {to} {loaded(r)}",
        )
        check(
            said(r, r.get("fifo", "?"), "FIFO"),
            f"a FIFO as {what}: a line names it ({r.get('log')})",
        )

    r = got.get("bitflip", {})
    check(r.get("same") is True and not r.get("error"), f"a flipped bit in step 2's file: step 1 loads {loaded(r)}")
    check(
        said(r, "zero_pp_rank_0_mp_rank_00_optim_states.pt", "damaged"),
        f"a flipped bit: a line names the damaged file ({r.get('log')})",
    )
    r = got.get("bitflip-all", {})
    err = r.get("error") or ""
    check(
        err.startswith("CheckpointError") and err.count("optim_states.pt") == 2,
        f"flipped bits in both steps: CheckpointError names both files ({err})",
    )

    for case, what in (("stock", "DeepSpeed's own save"), ("stock-over", "DeepSpeed's own save over our tag")):
        r = got.get(case, {})
        check(r.get("same") is True and not r.get("error"), f"{what} loads as it is {loaded(r)}")
        check(not said(r, "damaged"), f"{what}: nothing called damaged ({r.get('log')})")


def ranks(args, peers, out, env):
    if not job(peers, dict(env, MODE="save2"), 2, "save2", 300):
        return
    job(peers, dict(env, MODE="load2"), 2, "load2", 300)
    with open(os.path.join(out, "save2.json")) as f:
        ctl = json.load(f)[1]["ctl"]["ctl"]
    got = {(r["case"], r["rank"]): r for r in rows(os.path.join(out, "load2.jsonl"))}
    for case, what in (
        ("ctl", "rank 1's control file corrupt"),
        ("hostile", "rank 1's skeleton hostile"),
        ("bitflip", "a flipped bit in rank 1's file of step 2"),
    ):
        for rank in (0, 1):
            r = got.get((case, rank), {})
            check(
                r.get("same") is True and not r.get("error"),
                f"{what}: rank {rank} loads the older DISK save, the state saved then {loaded(r)}",
            )
    check(said(got.get(("ctl", 1), {}), ctl), "rank 1's control file corrupt: a line on rank 1 names it")
    check(not any(r.get("ran") for r in got.values()), "rank 1's skeleton hostile: the code it names did not run")
    check(
        said(got.get(("hostile", 1), {}), "posix.system"),
        "rank 1's skeleton hostile: a line on rank 1 names posix.system",
    )
    check(
        said(got.get(("bitflip", 0), {}), "zero_pp_rank_1_mp_rank_00_optim_states.pt", "damaged"),
        "a flipped bit in rank 1's file: named on rank 0 too (the ranks agree)",
    )


def packages_or_skip(peers):
    site = glob.glob(os.path.join(peers.path, "lib", "python3*", "site-packages"))
    if not site or not os.path.isdir(os.path.join(site[0], "deepspeed")):
        print(f"SKIP: deepspeed is not in the peer environment {peers.path}: run scripts/setup_peers.sh")
        sys.exit(SKIP)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("which", choices=["one", "ranks"])
    ap.add_argument("--peers", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--pypath", required=True)
    args = ap.parse_args()
    peers = peers_or_skip(args.peers)
    packages_or_skip(peers)
    out = tempfile.mkdtemp(prefix=f"xtimer-ds-trust-{args.which}-")
    shm = tempfile.mkdtemp(
        prefix=f"xtimer-ds-trust-{args.which}-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
    )
    env = base_env(
        out,
        os.pathsep.join([args.pypath, HERE]),
        SHM_ROOT=shm,
        XTIMER_CKPT_PERSIST_ON_FAILURE="0",
        DS_ACCELERATOR="cpu",
        OMP_NUM_THREADS="1",
    )
    try:
        {"one": one, "ranks": ranks}[args.which](args, peers, out, env)
    finally:
        if failures:
            for name in sorted(glob.glob(os.path.join(out, "*.err"))):
                print(f"--- {name}\n" + open(name, errors="replace").read()[-4000:])
    print(f"{len(failures)} failed" if failures else "all passed")
    shutil.rmtree(shm, ignore_errors=True)
    if not failures:
        shutil.rmtree(out, ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
