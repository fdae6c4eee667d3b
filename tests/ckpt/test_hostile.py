"""Hostile checkpoint folders through the Python API, xtc.py and `xtimer_ckpt inspect`: a FIFO
in a step folder (load and inspect return with an error, never wait on it), a rank file copied
into another step's folder (not loaded as that step), every step unusable (CheckpointError naming
each step, never a silent (0, None)), the inspect line of a step with no readable file, and a
shared-memory segment another user planted under the job's name (chown'ed to `nobody`, mode 0666,
or symbolic links): its snapshot is never loaded, the disk step is.
Loads and inspect run in child processes with a timeout, so a hang fails the test rather than
stalling it."""
import os
import shutil
import subprocess
import unittest

import torch

import ckpt_testlib as lib
from xtimer.ckpt import Checkpointer, StorageType, xtc

LOAD = r"""
import logging, sys
logging.basicConfig(level=logging.INFO)
from xtimer.ckpt import Checkpointer, CheckpointError
try:
    step, state = Checkpointer({ckpt!r}, shm_dir={shm!r}, saver=False).load_checkpoint()
except CheckpointError as e:
    print("ERROR:", e)
    sys.exit(3)
print("LOADED", step, None if state is None else float(state["w"][0]))
"""


class Hostile(unittest.TestCase):
    def setUp(self):
        self.dirs = lib.Dirs("hostile")
        self.inspect_bin = os.path.join(lib.build_dir(), "bin", "xtimer_ckpt")

    def tearDown(self):
        self.dirs.cleanup()

    def save(self, *steps):
        c = Checkpointer(self.dirs.ckpt, shm_dir=self.dirs.shm, saver=False)
        for s in steps:
            c.save_checkpoint(s, {"w": torch.full((1000,), float(s))}, storage_type=StorageType.DISK)
        c.wait()
        c.close()

    def load(self, shm=None):
        """(exit code, output) of a load in a fresh process with an empty shared-memory folder
        (or `shm`)."""
        code = LOAD.format(ckpt=self.dirs.ckpt, shm=shm or self.dirs.other_shm())
        p = lib.run_python(code, timeout=60, check=False)
        return p.returncode, p.stdout + p.stderr

    def inspect(self, path):
        p = subprocess.run([self.inspect_bin, "inspect", path], capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout + p.stderr

    def rank_file(self, step, rank=0):
        return os.path.join(self.dirs.ckpt, str(step), f"rank_{rank}.xtc")

    def plant(self, step, value):
        """A shared-memory folder holding a memory snapshot of this checkpoint folder, step `step`
        with w = value, whose process closed it: what another user could leave under its name."""
        shm = self.dirs.other_shm()
        c = Checkpointer(self.dirs.ckpt, shm_dir=shm, saver=False)
        c.save_checkpoint(step, {"w": torch.full((1000,), float(value))}, storage_type=StorageType.MEMORY)
        c.close()
        files = sorted(os.path.join(shm, n) for n in os.listdir(shm) if n.startswith("xtimer-ckpt-"))
        self.assertEqual([os.path.splitext(f)[1] for f in files], [".ctl", ".slot0", ".slot1"], files)
        return shm, files

    def test_a_planted_segment_is_not_loaded_the_disk_step_is(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to chown a file to another user")
        self.save(1)
        # Another user's files (nobody, mode 0666) under the job's segment name, holding step 9.
        shm, files = self.plant(9, 666)
        for f in files:
            os.chown(f, 65534, 65534)
            os.chmod(f, 0o666)
        rc, out = self.load(shm)
        self.assertEqual(rc, 0, out)
        self.assertIn("LOADED 1 1.0", out)  # before: LOADED 9 666.0, the other user's state
        self.assertIn(files[0] + " belongs to uid 65534, not to this user", out)
        self.assertEqual(out.count(files[0]), 1, out)  # one line
        # Symbolic links to such files elsewhere (here our own): never followed.
        linked = self.dirs.other_shm()
        _, files = self.plant(9, 666)
        for f in files:
            os.symlink(f, os.path.join(linked, os.path.basename(f)))
        rc, out = self.load(linked)
        self.assertEqual(rc, 0, out)
        self.assertIn("LOADED 1 1.0", out)
        self.assertIn("is a symbolic link", out)

    def test_a_fifo_in_a_step_folder_is_refused_not_waited_on(self):
        self.save(1)
        os.makedirs(os.path.dirname(self.rank_file(2)))
        os.mkfifo(self.rank_file(2))
        # The FIFO is step 2's only file: step 1 loads, the FIFO is named in the log.
        rc, out = self.load()
        self.assertEqual(rc, 0, out)
        self.assertIn("LOADED 1 1.0", out)
        self.assertIn(self.rank_file(2) + " is a FIFO", out)
        rc, out = self.inspect(self.dirs.ckpt)
        self.assertEqual(rc, 1, out)
        self.assertIn("is a FIFO, not a regular file", out)
        rc, out = self.inspect(self.rank_file(2))
        self.assertEqual(rc, 1, out)
        with self.assertRaisesRegex(xtc.XtcError, "is a FIFO"):
            xtc.read_xtc(self.rank_file(2))
        # The FIFO as `latest`: a note, and nothing waits on it.
        os.mkfifo(os.path.join(self.dirs.ckpt, "latest.fifo"))
        os.replace(os.path.join(self.dirs.ckpt, "latest.fifo"), os.path.join(self.dirs.ckpt, "latest"))
        rc, out = self.inspect(self.dirs.ckpt)
        self.assertIn("latest is a FIFO", out)
        rc, out = self.load()
        self.assertIn("LOADED 1 1.0", out)

    def test_a_file_copied_into_another_step_folder_is_not_that_step(self):
        self.save(2)
        os.makedirs(os.path.dirname(self.rank_file(3)))
        shutil.copy(self.rank_file(2), self.rank_file(3))
        rc, out = self.load()
        self.assertEqual(rc, 0, out)
        self.assertIn("LOADED 2 2.0", out)  # step 2's state as step 2, never as step 3
        self.assertIn("a file of another step copied or moved into folder 3", out)
        rc, out = self.inspect(self.dirs.ckpt)
        self.assertEqual(rc, 1, out)
        self.assertIn("CORRUPT", out)
        self.assertIn("not loaded as step 3", out)
        rc, out = self.inspect(self.rank_file(3))
        self.assertEqual(rc, 1, out)
        with self.assertRaisesRegex(xtc.XtcError, "another step"):
            xtc.read_xtc(self.rank_file(3))

    def test_every_step_unusable_raises_naming_each_step(self):
        self.save(1, 2)
        for step in (1, 2):
            with open(self.rank_file(step), "r+b") as f:
                f.truncate(100)
        rc, out = self.load()
        self.assertEqual(rc, 3, out)  # CheckpointError, never LOADED 0 None
        self.assertIn("no intact checkpoint", out)
        self.assertIn("step 2:", out)
        self.assertIn("step 1:", out)
        self.assertIn("truncated", out)

    def test_inspect_names_a_step_with_no_readable_file(self):
        self.save(1)
        os.makedirs(os.path.dirname(self.rank_file(2)))
        with open(self.rank_file(2), "wb") as f:
            f.write(b"not a checkpoint")
        rc, out = self.inspect(self.dirs.ckpt)
        self.assertEqual(rc, 1, out)
        self.assertNotIn("of 0 ranks", out)
        self.assertIn("step 2: unusable (1 rank file, none readable)", out)


if __name__ == "__main__":
    unittest.main()
