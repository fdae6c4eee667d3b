"""Two ranks (gloo) saving and loading together: both load the same step from memory; with one
rank's memory copy missing, both load the same (older, on disk) step from disk; with one rank's
file of the only step corrupt, both raise CheckpointError."""
import glob
import json
import os
import socket
import subprocess
import sys
import unittest

import ckpt_testlib as lib

WORKER = r"""
import json, os, sys, torch, torch.distributed as dist
sys.path.insert(0, {testdir!r})
from xtimer.ckpt import Checkpointer, CheckpointError, StorageType
dist.init_process_group("gloo")
rank = dist.get_rank()
c = Checkpointer({ckpt!r}, shm_dir={shm!r} + "/node" + str(rank), saver_idle_exit=60)
def state(step):
    g = torch.Generator().manual_seed(step * 10 + rank)
    return {{"w": torch.randn(50000, generator=g), "b": torch.randn(10, generator=g).to(torch.bfloat16),
             "rank": rank, "step": step}}
def digest(sd):
    return [sd["rank"], sd["step"], sd["w"].sum().item(), sd["b"].view(torch.int16).sum().item()]
out = {{}}
if {phase!r} == "save":
    c.save_checkpoint(10, state(10), storage_type=StorageType.DISK)
    c.wait()
    dist.barrier()
    c.save_checkpoint(20, state(20), storage_type=StorageType.MEMORY)
    out["want10"], out["want20"] = digest(state(10)), digest(state(20))
else:
    try:
        step, sd = c.load_checkpoint()
        out["step"], out["digest"] = step, None if sd is None else digest(sd)
        out["exact"] = sd is not None and all(torch.equal(sd[k], state(step)[k]) for k in ("w", "b"))
    except CheckpointError as e:
        out["error"] = str(e)
dist.barrier()
c.close()
print("RESULT", json.dumps(out))
dist.destroy_process_group()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TwoRanks(unittest.TestCase):
    def setUp(self):
        self.dirs = lib.Dirs("tworanks")
        for r in (0, 1):
            os.makedirs(os.path.join(self.dirs.shm, f"node{r}"))  # one "node" per rank

    def tearDown(self):
        for r in (0, 1):
            lib.stop_saver(os.path.join(self.dirs.shm, f"node{r}"))
        self.dirs.cleanup()

    def run_ranks(self, phase):
        port = str(free_port())
        procs = []
        for r in (0, 1):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            code = WORKER.format(testdir=lib.HERE, ckpt=self.dirs.ckpt, shm=self.dirs.shm, phase=phase)
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                )
            )
        results = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, out + err)
            line = [l for l in out.splitlines() if l.startswith("RESULT ")]
            self.assertTrue(line, out + err)
            results.append(json.loads(line[0][7:]))
        return results

    def test_memory_when_all_have_it_else_the_same_step_from_disk(self):
        saved = self.run_ranks("save")
        # Both ranks have step 20 in memory: both load it, bit-identical.
        loaded = self.run_ranks("load")
        for r in (0, 1):
            self.assertEqual(loaded[r]["step"], 20)
            self.assertEqual(loaded[r]["digest"], saved[r]["want20"])
            self.assertTrue(loaded[r]["exact"])
        # Rank 1's node lost its memory copy: both load step 10 from disk, not a mix.
        for f in glob.glob(os.path.join(self.dirs.shm, "node1", "xtimer-ckpt-*")):
            os.unlink(f)
        loaded = self.run_ranks("load")
        for r in (0, 1):
            self.assertEqual(loaded[r]["step"], 10)
            self.assertEqual(loaded[r]["digest"], saved[r]["want10"])
            self.assertTrue(loaded[r]["exact"])
        # No memory copy anywhere and rank 1's file of the only step on disk is corrupt: both ranks
        # raise CheckpointError (rank 0, whose own file is fine, used to return (0, None)).
        for f in glob.glob(os.path.join(self.dirs.shm, "node0", "xtimer-ckpt-*")):
            os.unlink(f)
        path = os.path.join(self.dirs.ckpt, "10", "rank_1.xtc")
        with open(path, "r+b") as f:
            f.seek(4096 + 1000)
            b = f.read(1)
            f.seek(4096 + 1000)
            f.write(bytes([b[0] ^ 0x20]))
        loaded = self.run_ranks("load")
        for r in (0, 1):
            self.assertIn("error", loaded[r], f"rank {r} loaded {loaded[r]} from a step with a corrupt file")
            self.assertIn("no intact checkpoint", loaded[r]["error"])
            self.assertIn("step 10:", loaded[r]["error"])
        self.assertIn(path, loaded[1]["error"])


if __name__ == "__main__":
    unittest.main()
