"""Loading after the world size changed (an elastic restart with fewer or more nodes), with real
gloo ranks: replicated state (DdpCheckpointer, replicated=True) loads at any world size, bytes
equal to what was saved; a step with a node's files missing still loads when replicated; sharded
state saved at another world size raises CheckpointError naming both sizes on every rank (no
rank hangs, no silent start from step 0)."""
import json
import os
import socket
import subprocess
import sys
import unittest

import ckpt_testlib as lib

WORKER = r"""
import json, os, sys, torch, torch.distributed as dist
from xtimer.ckpt import Checkpointer, CheckpointError, DdpCheckpointer, StorageType
args = json.loads(os.environ["RESIZE_ARGS"])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
shm = os.path.join(args["shm"], "rank%d" % rank)
os.makedirs(shm, exist_ok=True)
if args["kind"] == "ddp":
    c = DdpCheckpointer(args["ckpt"], shm_dir=shm, saver=False)
else:
    c = Checkpointer(args["ckpt"], shm_dir=shm, saver=False, replicated=args["kind"] == "replicated")
def state(step):
    # Replicated: the same on every rank. Sharded: each rank its own part.
    seed = step * 100 + (0 if args["kind"] != "sharded" else rank)
    g = torch.Generator().manual_seed(seed)
    return {"model": {"w": torch.randn(4096, generator=g), "b": torch.randn(7, generator=g).double()},
            "step": step}
out = {"rank": rank}
if args["phase"] == "save":
    for step in args["steps"]:
        c.save_checkpoint(step, state(step), storage_type=StorageType.DISK)
    c.wait()
else:
    try:
        if args["kind"] == "ddp":
            sd = c.load_checkpoint()
            step = sd.get("step", 0) if sd else 0
        else:
            step, sd = c.load_checkpoint()
        out["step"] = step
        out["empty"] = not sd
        if sd:
            want = state(step)
            out["exact"] = all(torch.equal(sd["model"][k], want["model"][k]) for k in ("w", "b"))
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


class Resize(unittest.TestCase):
    def setUp(self):
        self.dirs = lib.Dirs("resize")

    def tearDown(self):
        self.dirs.cleanup()

    def run_ranks(self, world, kind, phase, steps=()):
        """world gloo ranks; each with a fresh shared-memory folder, so loads come from disk."""
        shm = self.dirs.other_shm()
        port = str(free_port())
        args = json.dumps({"ckpt": self.dirs.ckpt, "shm": shm, "kind": kind, "phase": phase, "steps": list(steps)})
        procs = []
        for r in range(world):
            env = dict(
                os.environ,
                RANK=str(r),
                WORLD_SIZE=str(world),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
                RESIZE_ARGS=args,
            )
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", WORKER], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
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

    def assert_loaded(self, results, step):
        for r in results:
            self.assertNotIn("error", r)
            self.assertEqual(r["step"], step, r)
            self.assertTrue(r["exact"], r)

    def test_replicated_state_loads_at_a_smaller_and_a_larger_world(self):
        self.run_ranks(2, "replicated", "save", steps=[4, 9])
        self.assert_loaded(self.run_ranks(3, "replicated", "load"), 9)
        self.assert_loaded(self.run_ranks(1, "replicated", "load"), 9)

    def test_ddp_checkpointer_returns_the_state_dict_and_resizes(self):
        self.assertTrue(all(r["empty"] for r in self.run_ranks(1, "ddp", "load")), "nothing saved: {}")
        self.run_ranks(3, "ddp", "save", steps=[5])
        self.assert_loaded(self.run_ranks(2, "ddp", "load"), 5)

    def test_replicated_step_with_a_lost_nodes_files_missing_still_loads(self):
        self.run_ranks(2, "replicated", "save", steps=[4, 9])
        os.unlink(os.path.join(self.dirs.ckpt, "9", "rank_0.xtc"))  # rank 0's node died before writing
        self.assert_loaded(self.run_ranks(2, "replicated", "load"), 9)
        self.assert_loaded(self.run_ranks(1, "replicated", "load"), 9)

    def test_sharded_state_at_another_world_size_is_an_error_naming_both(self):
        self.run_ranks(2, "sharded", "save", steps=[4])
        for r in self.run_ranks(3, "sharded", "load"):
            self.assertIn("error", r, "a sharded step of world size 2 must not load at world size 3")
            self.assertIn("saved by 2 ranks", r["error"])
            self.assertIn("this job has 3", r["error"])
        # At the world size that saved it, it loads.
        self.assert_loaded(self.run_ranks(2, "sharded", "load"), 4)

    def test_sharded_step_with_files_missing_falls_back_to_the_complete_one(self):
        self.run_ranks(2, "sharded", "save", steps=[4, 9])
        os.unlink(os.path.join(self.dirs.ckpt, "9", "rank_1.xtc"))
        self.assert_loaded(self.run_ranks(2, "sharded", "load"), 4)


if __name__ == "__main__":
    unittest.main()
