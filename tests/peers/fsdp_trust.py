#!/usr/bin/env python3
"""FsdpShardCheckpointer loading from shared memory and step folders that others could have
written or damaged: 2 gloo ranks (FSDP2, CPU), real torch 2.15 DCP. Every damaged case must load
the newest intact step, equal to what was saved then, with one line naming what was wrong; a
load that blocks is killed by the harness (--timeout) and fails the case.

  memory: steps 1 and 2 saved to disk by the persisters ("mixed"), and in three more folders
          step 1 on disk and step 2 in memory only:
    - hostile: each rank's snapshot overwritten (through the core, checksums valid) with step 3:
      rank 0's pickle calls os.system (touches a file), rank 1's is not a pickle. The command
      must not run; step 1 loads from disk; the lines name posix.system and the snapshots.
    - control: rank 0's segment control file overwritten with garbage -> step 1 from disk.
    - segment: a bit flipped in rank 0's snapshot data -> step 1 from disk.
    - mixed-intact: step 2 without .metadata, rank 0's part in memory only, rank 1's on disk only
      (its results file read for the places, its checksum verified) -> step 2 loads.
    - mixed-fifo-sidecar: then rank 1's results file replaced by a FIFO -> step 1 loads.
  disk:   steps 1 and 2 saved to disk, copied to one folder per case, step 2 damaged; nothing in
          memory; and a folder written by stock DCP (dcp.save) without xtimer:
    - fifo-distcp, fifo-metadata, fifo-sidecar, folder-distcp (a FIFO or folder where the file
      was), empty-metadata, cut-metadata, cut-distcp, missing-distcp, flipped-distcp (one bit of
      a tensor's data) -> step 1 loads, the line names the file;
    - intact -> step 2; stock -> stock DCP's step 7 loads; nothing-intact (step 1 flipped too)
      -> CheckpointError naming both steps' files, never a silent start from scratch;
    - resume_path= naming the intact step 2 loads it; naming fifo-distcp's step 2 raises
      CheckpointError naming the FIFO.

  fsdp_trust.py memory|disk --peers DIR --pypath BUILD/lib/python [--timeout S]
"""
import argparse
import glob
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from checks import check, failures, free_port, load_json  # noqa: E402
from peers import base_env, peers_or_skip  # noqa: E402

WORKER = r"""
import glob, json, logging, os, pickle, shutil, stat, sys, time, torch, torch.distributed as dist
import numpy as np
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.fsdp import fully_shard
import xtimer.ckpt.fsdp as fsdp
from xtimer.ckpt.fsdp import CheckpointError, FsdpShardCheckpointer, StorageType
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
OUT, MODE, PHASE = os.environ["OUT"], os.environ["MODE"], os.environ["PHASE"]
lines = []
class Keep(logging.Handler):
    def emit(self, record):
        lines.append(record.getMessage())
logging.getLogger("xtimer.ckpt").addHandler(Keep())
logging.basicConfig(level=logging.WARNING)

def model_sd(step):
    # The state of step s: the same initialisation, every parameter + s.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Linear(64, 8))
    for m in model:
        fully_shard(m)
    fully_shard(model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(float(step))
    return get_state_dict(model, [])[0]

class NoPersister:  # the folders whose disk steps are copies need none (its start costs seconds)
    def __init__(self, rank):
        self.rank, self.step = rank, -1
    def taken(self):
        return True
    def wait_taken(self):
        pass
    def wait_done(self, timeout):
        pass
    def request(self, step, extra=None):
        raise RuntimeError("this test starts no persister here")
    def close(self):
        pass

def shm(name):
    d = os.path.join(OUT, "shm-%s-%d" % (name, rank))
    os.makedirs(d, exist_ok=True)
    return d

def wait_metadata(d, step):
    # .metadata follows once every rank's file is there (the last persister writes it)
    for _ in range(1200):
        if os.path.exists(os.path.join(d, str(step), ".metadata")):
            return
        time.sleep(0.05)
    raise SystemExit("no .metadata in %s/%d" % (d, step))

def load(case, d, shm_name, resume_path=""):
    del lines[:]
    out = {}
    msd = model_sd(0)
    with torch.no_grad():
        for v in msd.values():
            v.zero_()
    ck = FsdpShardCheckpointer(d, shm_dir=shm(shm_name))
    sd = {"model": msd, "step": -1}
    try:
        reader = ck.get_storage_reader(resume_path)
        if reader is None:
            out["loaded"] = None
        else:
            dcp.load(sd, storage_reader=reader)
            out["loaded"] = sd["step"]
            want = model_sd(sd["step"])
            out["equal"] = all(torch.equal(msd[k].full_tensor(), want[k].full_tensor()) for k in want)
            out["from"] = ck.loaded_from
    except CheckpointError as e:
        out["error"] = str(e)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # torch's CheckpointException is a BaseException
        out["raised"] = "%s: %s" % (type(e).__name__, str(e)[:500])
    out["log"] = list(lines)
    json.dump(out, open(os.path.join(OUT, "res-%s-%d.json" % (case, rank)), "w"))
    ck.close()
    dist.barrier()

def hostile_snapshot(ck):
    # Another user of the node writes the rank's segment through the core (its checksums are
    # then valid): step 3, whose plan is a pickle that runs a command (rank 0) or no pickle (rank 1).
    from xtimer.ckpt.checkpointer import _Entries
    class Evil:
        def __reduce__(self):
            return (os.system, ("touch " + os.path.join(OUT, "pwned-%d" % rank),))
    if rank == 0:
        local = pickle.dumps({"format": "xtimer-dcp-snapshot-1", "step": 3, "rank": 0, "world": 2, "x": Evil()})
    else:
        local = b"\x80\x05 this is not a pickle"
    ents = _Entries(torch)
    arrays = [np.frombuffer(local, np.uint8), np.zeros(8, np.uint8), np.zeros(8, np.uint8)]
    entries = [ents.entry(n, a) for n, a in zip(("xtimer.local", "xtimer.global", "xtimer.bytes"), arrays)]
    saved, why = ck._get_core(rank).save(3, 2, fsdp._tree_json(0), entries, False)
    assert saved, why

def fifo(path):
    os.unlink(path)
    os.mkfifo(path)

if PHASE == "save":
    mixed = os.path.join(OUT, "mixed")
    ck = FsdpShardCheckpointer(mixed, shm_dir=shm("mixed"))
    for step in (1, 2):
        ck.save_checkpoint(step, {"model": model_sd(step), "step": step}, storage_type=StorageType.DISK)
        ck.wait_latest_checkpoint(120)
    if rank == 0:
        wait_metadata(mixed, 1)
        wait_metadata(mixed, 2)
    dist.barrier()
    if MODE == "disk":
        dcp.save({"model": model_sd(7), "step": 7}, checkpoint_id=os.path.join(OUT, "stock", "7"))
    else:
        fsdp._start_persister = lambda owner, r: NoPersister(r)
        for case in ("hostile", "control", "segment"):
            d = os.path.join(OUT, case)
            if rank == 0:
                shutil.copytree(os.path.join(mixed, "1"), os.path.join(d, "1"))
            dist.barrier()
            c = FsdpShardCheckpointer(d, shm_dir=shm(case))
            assert c.save_checkpoint(2, {"model": model_sd(2), "step": 2}, storage_type=StorageType.MEMORY)
            if case == "hostile":
                hostile_snapshot(c)
            c.close()
    ck.close()
    dist.barrier()
else:
    fsdp._start_persister = lambda owner, r: NoPersister(r)
    for case in os.environ["CASES"].split(","):
        d = os.path.join(OUT, case)
        if case == "mixed-intact":
            d = os.path.join(OUT, "mixed")
        elif case == "mixed-fifo-sidecar":
            d = os.path.join(OUT, "mixed")
            if rank == 0:
                fifo(glob.glob(os.path.join(d, "2", ".xtimer-rank_1.*"))[0])
            dist.barrier()
        elif case.startswith("resume-"):  # a folder named by resume_path= (the step folder of a case)
            load(case, os.path.join(OUT, "resume"), case, os.path.join(OUT, case[len("resume-"):], "2"))
            continue
        load(case, d, "mixed" if case.startswith("mixed") else case)
"""


def run_job(peers, env, timeout):
    """Both ranks of one job (RANK 0 and 1, their own session each); (exit statuses, logs).
    Killed (with everything they started) after `timeout` seconds: statuses None then."""
    env = dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2", LOCAL_RANK="0")
    logs = [tempfile.TemporaryFile(mode="w+") for _ in range(2)]
    procs = [
        subprocess.Popen(
            [peers.python, "-c", WORKER],
            env=dict(env, RANK=str(r)),
            stdout=logs[r],
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for r in range(2)
    ]
    deadline = time.time() + timeout
    rcs = []
    for p in procs:
        try:
            rcs.append(p.wait(max(1, deadline - time.time())))
        except subprocess.TimeoutExpired:
            rcs.append(None)
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        else:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # a persister left in the rank's session
            except ProcessLookupError:
                pass
    out = []
    for f in logs:
        f.seek(0)
        out.append(f.read())
    if any(rc != 0 for rc in rcs):
        print(f"--- rank 0 (exit {rcs[0]}):\n{out[0][-3000:]}\n--- rank 1 (exit {rcs[1]}):\n{out[1][-3000:]}")
    return rcs, out


def replace_by_fifo(path):
    os.unlink(path)
    os.mkfifo(path)


def flip_tensor_bit(path):
    """Flips one bit in the largest tensor's data in a .distcp file (a run of torch.save zip
    archives; a tensor's bytes are the member `.../data/0`, whose local header gives no size:
    it runs to the data descriptor before the next member's header)."""
    raw = bytearray(open(path, "rb").read())
    heads = []
    at = raw.find(b"PK\x03\x04")
    while at >= 0:
        heads.append(at)
        at = raw.find(b"PK\x03\x04", at + 4)
    best = None
    for at, nxt in zip(heads, heads[1:]):
        name_len, extra_len = struct.unpack_from("<HH", raw, at + 26)
        if raw[at + 30 : at + 30 + name_len].endswith(b"/data/0"):
            start = at + 30 + name_len + extra_len
            if best is None or nxt - start > best[1]:
                best = (start, nxt - start)
    assert best and best[1] > 256, f"no tensor data found in {path}"
    raw[best[0] + best[1] // 4] ^= 0x10
    open(path, "wb").write(raw)


SELECTED = []  # the cases run


def expect_older(out, case, name, reason, step=1):
    if case not in SELECTED:
        return None
    r0, r1 = (load_json(os.path.join(out, f"res-{case}-{r}.json")) for r in (0, 1))
    if not check(r0 is not None and r1 is not None, f"{case}: the load returned on both ranks"):
        return
    got = [(r.get("loaded"), r.get("equal")) for r in (r0, r1)]
    ok = check(
        got == [(step, True), (step, True)],
        f"{case}: step {step} loads, equal to its save, on both ranks "
        f"({got}{'; ' + (r0.get('error') or r0.get('raised') or '') if got[0][0] is None else ''})",
    )
    if ok and name:
        hits = [x for x in r0["log"] if name in x]
        check(
            len(hits) == 1 and reason in hits[0],
            f"{case}: one line names {name} and says '{reason}' ({hits[:2] or r0['log'][-2:]})",
        )
    return r0, r1


def disk_cases(out):
    base = os.path.join(out, "mixed")
    cases = {}

    def case(name, damage):
        d = os.path.join(out, name)
        shutil.copytree(base, d, symlinks=True)
        damage(os.path.join(d, "2"))
        cases[name] = d

    case("intact", lambda s: None)
    case("fifo-distcp", lambda s: replace_by_fifo(os.path.join(s, "__0_0.distcp")))
    case("fifo-metadata", lambda s: replace_by_fifo(os.path.join(s, ".metadata")))
    case("fifo-sidecar", lambda s: replace_by_fifo(glob.glob(os.path.join(s, ".xtimer-rank_1.*"))[0]))

    def folder(s):
        os.unlink(os.path.join(s, "__1_0.distcp"))
        os.mkdir(os.path.join(s, "__1_0.distcp"))

    case("folder-distcp", folder)
    case("empty-metadata", lambda s: os.truncate(os.path.join(s, ".metadata"), 0))
    case(
        "cut-metadata",
        lambda s: os.truncate(os.path.join(s, ".metadata"), os.path.getsize(os.path.join(s, ".metadata")) // 2),
    )
    case(
        "cut-distcp",
        lambda s: os.truncate(os.path.join(s, "__1_0.distcp"), os.path.getsize(os.path.join(s, "__1_0.distcp")) // 2),
    )
    case("missing-distcp", lambda s: os.unlink(os.path.join(s, "__1_0.distcp")))
    case("flipped-distcp", lambda s: flip_tensor_bit(os.path.join(s, "__0_0.distcp")))

    def both(s):
        replace_by_fifo(os.path.join(s, "__0_0.distcp"))
        flip_tensor_bit(os.path.join(os.path.dirname(s), "1", "__1_0.distcp"))

    case("nothing-intact", both)
    return list(cases) + ["stock", "resume-intact", "resume-fifo-distcp"]


def check_disk(out):
    r = expect_older(out, "intact", None, None, step=2)
    if r:
        check(r[0]["log"] == [], f"intact: nothing logged ({r[0]['log'][:2]})")
    expect_older(out, "fifo-distcp", "2/__0_0.distcp", "is a FIFO")
    expect_older(out, "fifo-metadata", "2/.metadata", "is a FIFO")
    expect_older(out, "fifo-sidecar", "2/.xtimer-rank_1.", "is a FIFO")
    expect_older(out, "folder-distcp", "2/__1_0.distcp", "is a folder")
    expect_older(out, "empty-metadata", "2/.metadata", "not a readable DCP .metadata")
    expect_older(out, "cut-metadata", "2/.metadata", "not a readable DCP .metadata")
    expect_older(out, "cut-distcp", "2/__1_0.distcp", "cut short")
    expect_older(out, "missing-distcp", "2/__1_0.distcp", "is missing")
    expect_older(out, "flipped-distcp", "2/__0_0.distcp", "does not match the checksum")
    r0 = load_json(os.path.join(out, "res-nothing-intact-0.json")) or {}
    err = r0.get("error", "")
    "nothing-intact" not in SELECTED or check(
        "2/__0_0.distcp is a FIFO" in err and "1/__1_0.distcp does not match the checksum" in err,
        f"nothing-intact: CheckpointError names both steps' files ({err or r0.get('raised') or r0.get('loaded')})",
    )
    expect_older(out, "stock", None, None, step=7)
    expect_older(out, "resume-intact", None, None, step=2)
    if "resume-fifo-distcp" in SELECTED:
        r0 = load_json(os.path.join(out, "res-resume-fifo-distcp-0.json"))
        err = (r0 or {}).get("error", "")
        check(
            "fifo-distcp/2/__0_0.distcp is a FIFO" in err,
            f"resume-fifo-distcp: resume_path= to a folder with a FIFO returns CheckpointError naming it "
            f"({err or (r0 or {}).get('raised') or (r0 or {}).get('loaded')})",
        )


def memory_cases(out):
    # rank 0's segment: the control file and the data files of the folder "control"/"segment"
    ctl = glob.glob(os.path.join(out, "shm-control-0", "*-r0.ctl"))
    check(len(ctl) == 1, f"control: rank 0's control file found ({ctl})")
    if ctl:
        size = os.path.getsize(ctl[0])
        with open(ctl[0], "r+b") as f:
            f.write(bytes((i * 37 + 11) % 256 for i in range(size)))
    data = [p for p in glob.glob(os.path.join(out, "shm-segment-0", "*")) if not p.endswith(".ctl")]
    data = [p for p in data if os.path.isfile(p) and os.path.getsize(p) > 0]
    check(bool(data), f"segment: rank 0's snapshot data found ({data})")
    for p in data:  # both slots: the current one is either
        with open(p, "r+b") as f:
            # The slot's entries lie somewhere in the file; flip a bit in every 4 KiB page that is
            # not all zero past the first (the header), so some entry's data changes.
            raw = bytearray(f.read())
            for at in range(4096, len(raw), 4096):
                if any(raw[at : at + 64]):
                    raw[at + 8] ^= 0x01
            f.seek(0)
            f.write(raw)
    shutil.rmtree(os.path.join(out, "shm-mixed-1"))  # rank 1's node is gone: its step 2 is on disk only
    step2 = os.path.join(out, "mixed", "2")
    for p in [os.path.join(step2, ".metadata"), os.path.join(step2, "__0_0.distcp")] + glob.glob(
        os.path.join(step2, ".xtimer-rank_0.*")
    ):
        os.unlink(p)  # rank 0's persister never wrote step 2: its part is in memory only
    return ["hostile", "control", "segment", "mixed-intact", "mixed-fifo-sidecar"]


def check_memory(out):
    "hostile" not in SELECTED or check(
        not glob.glob(os.path.join(out, "pwned-*")), "hostile: the command in the snapshot's pickle did not run"
    )
    r = expect_older(out, "hostile", None, None)
    if r:
        l0, l1 = r[0]["log"], r[1]["log"]
        check(
            any("posix.system" in x and "shm-hostile-0" in x for x in l0),
            f"hostile: rank 0's line names posix.system and its snapshot ({l0[:1]})",
        )
        check(
            any("not a readable pickle" in x and "shm-hostile-1" in x for x in l1),
            f"hostile: rank 1's line says its snapshot is not a pickle ({l1[:1]})",
        )
    expect_older(out, "control", "shm-control-0", "")
    expect_older(out, "segment", "shm-segment-0", "")
    r = expect_older(out, "mixed-intact", None, None, step=2)
    if r:
        check(
            r[0].get("from") == {"step": 2, "memory": [0], "disk": [1]},
            f"mixed-intact: rank 0's part from memory, rank 1's from disk ({r[0].get('from')})",
        )
    expect_older(out, "mixed-fifo-sidecar", "2/.xtimer-rank_1.", "is a FIFO")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["memory", "disk"])
    ap.add_argument("--peers", required=True)
    ap.add_argument("--pypath", required=True)
    ap.add_argument("--bin")
    ap.add_argument("--timeout", type=float, default=150, help="seconds a job may take before it is killed")
    ap.add_argument("--cases", help="only these cases (comma-separated)")
    ap.add_argument(
        "--each", action="store_true", help="each case in a job of its own (one blocking does not hide the next)"
    )
    args = ap.parse_args()
    peers = peers_or_skip(args.peers)
    out = tempfile.mkdtemp(prefix=f"xtimer-peers-fsdp-trust-{args.mode}-")
    t = time.time()
    try:
        env = base_env(out, args.pypath, MODE=args.mode)
        rcs, _ = run_job(peers, dict(env, PHASE="save"), args.timeout)
        if check(rcs == [0, 0], f"2 ranks saved the steps (exit {rcs})"):
            cases = disk_cases(out) if args.mode == "disk" else memory_cases(out)
            if args.cases:
                cases = [c for c in cases if c in args.cases.split(",")]
            SELECTED[:] = cases
            for batch in [[c] for c in cases] if args.each else [cases]:
                rcs, _ = run_job(peers, dict(env, PHASE="load", CASES=",".join(batch)), args.timeout)
                done = [c for c in batch if os.path.exists(os.path.join(out, f"res-{c}-0.json"))]
                check(
                    rcs == [0, 0],
                    f"the loads of {','.join(batch) if args.each else 'every case'} returned (exit {rcs}; "
                    f"None: killed after {args.timeout:.0f} s, blocked after {done[-1:] or 'no case'})",
                )
            (check_disk if args.mode == "disk" else check_memory)(out)
    finally:
        print(f"time: {time.time() - t:.1f} s")
        if failures:
            print(f"outputs kept in {out}")
        else:
            shutil.rmtree(out, ignore_errors=True)
    print(f"{len(failures)} failed" if failures else "all passed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
