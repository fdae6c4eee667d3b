"""Failures: a process killed between a memory save and its persist (the saver writes it), kill -9
during memory saves through the Python API, a file with one flipped byte, a /dev/shm too small."""
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import torch

import ckpt_testlib as lib
from xtimer.ckpt import Checkpointer, CheckpointError, StorageType, xtc

CHILD_SAVE = r"""
import os, signal, sys, torch
sys.path.insert(0, {testdir!r})
import ckpt_testlib as lib
from xtimer.ckpt import Checkpointer, StorageType
c = Checkpointer({ckpt!r}, shm_dir={shm!r}, saver_idle_exit=30)
c.save_checkpoint(3, {{"w": torch.full((1000,), 3.0)}}, storage_type=StorageType.DISK)
c.wait()
state = lib.realistic_state(step=7)
c.save_checkpoint(7, state, storage_type=StorageType.MEMORY)
torch.save(state, {ref!r})  # what the test compares with
os.kill(os.getpid(), signal.SIGKILL)  # dies before anything wrote step 7 to disk
"""

CHILD_LOOP = r"""
import sys, torch
from xtimer.ckpt import Checkpointer, StorageType
c = Checkpointer({ckpt!r}, shm_dir={shm!r}, saver=False)
x = torch.empty(3 << 20, dtype=torch.int64)  # 24 MiB
step = {first}
while True:
    torch.manual_seed(step)
    x.random_()
    print("begin", step, flush=True)
    c.save_checkpoint(step, {{"x": x, "step": step}}, storage_type=StorageType.MEMORY)
    print("done", step, flush=True)
    step += 1
"""


class Failures(unittest.TestCase):
    def setUp(self):
        self.dirs = lib.Dirs("failures")

    def tearDown(self):
        self.dirs.cleanup()

    def test_saver_persists_what_a_dead_process_saved_to_memory(self):
        ref = os.path.join(self.dirs.root, "ref.pt")
        code = CHILD_SAVE.format(testdir=lib.HERE, ckpt=self.dirs.ckpt, shm=self.dirs.shm, ref=ref)
        p = lib.run_python(code, check=False)
        self.assertEqual(p.returncode, -signal.SIGKILL, p.stderr)
        path = os.path.join(self.dirs.ckpt, "7", "rank_0.xtc")
        end = time.time() + 30
        while not os.path.exists(path) and time.time() < end:
            time.sleep(0.05)
        self.assertTrue(os.path.exists(path), "the saver did not write step 7 after the process died")
        # A new process on a node without the memory copy loads it from disk.
        other = self.dirs.other_shm()
        code = f"""
import sys, torch
sys.path.insert(0, {lib.HERE!r})
import ckpt_testlib as lib, unittest
from xtimer.ckpt import Checkpointer
step, got = Checkpointer({self.dirs.ckpt!r}, shm_dir={other!r}, saver=False).load_checkpoint()
assert step == 7, step
lib.assert_same(unittest.TestCase(), torch.load({ref!r}), got)
print("ok")
"""
        self.assertIn("ok", lib.run_python(code).stdout)
        with open(os.path.join(self.dirs.ckpt, "latest")) as f:
            self.assertIn('"step":7', f.read())

    def test_kill_during_memory_saves_loads_previous_or_new_step(self):
        # The C++ test (ckpt_kill_test) does this 50 times on the core; here a few times through
        # the Python API, whose process takes ~1 s to start.
        rng = random.Random(int(time.time()))
        first, last = 1, 0
        for i in range(4):
            code = CHILD_LOOP.format(ckpt=self.dirs.ckpt, shm=self.dirs.shm, first=first)
            child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
            begun = done = -1
            t_begin = None
            durations = []
            while True:
                line = child.stdout.readline()
                self.assertTrue(line, "child died")
                what, step = line.split()
                if what == "begin":
                    begun, t_begin = int(step), time.monotonic()
                else:
                    done = int(step)
                    durations.append(time.monotonic() - t_begin)
                    if len(durations) >= 2:
                        break
            line = child.stdout.readline()  # the next save has begun
            begun = int(line.split()[1])
            time.sleep(rng.uniform(0, 1.5 * max(durations)))
            child.kill()
            child.wait()
            for line in child.stdout.read().splitlines():  # what it printed before it died
                what, step = line.split()
                if what == "begin":
                    begun = int(step)
                else:
                    done = int(step)
            child.stdout.close()
            step, got = Checkpointer(self.dirs.ckpt, shm_dir=self.dirs.shm, saver=False).load_checkpoint()
            self.assertIn(step, (done, begun))
            self.assertGreaterEqual(step, last)
            torch.manual_seed(step)
            want = torch.empty(3 << 20, dtype=torch.int64).random_()
            self.assertTrue(torch.equal(got["x"], want), f"kill {i}: step {step} is not bit-identical")
            self.assertEqual(got["step"], step)
            last, first = step, begun + 1

    def test_a_flipped_byte_is_refused_naming_the_file(self):
        c = Checkpointer(self.dirs.ckpt, shm_dir=self.dirs.shm, saver_idle_exit=30)
        good = {"w": torch.arange(100000, dtype=torch.float32)}
        c.save_checkpoint(1, good, storage_type=StorageType.DISK)
        c.save_checkpoint(2, {"w": torch.ones(100000)}, storage_type=StorageType.DISK)
        c.wait()
        path = os.path.join(self.dirs.ckpt, "2", "rank_0.xtc")
        with open(path, "r+b") as f:
            f.seek(4096 + 200000)
            b = f.read(1)
            f.seek(4096 + 200000)
            f.write(bytes([b[0] ^ 0x01]))

        def fresh():
            return Checkpointer(self.dirs.ckpt, shm_dir=self.dirs.other_shm(), saver=False)

        # An older valid step remains: it is loaded, the corrupt file is named in the log.
        with self.assertLogs("xtimer.ckpt", level="ERROR") as logs:
            step, got = fresh().load_checkpoint()
        self.assertEqual(step, 1)
        self.assertTrue(torch.equal(got["w"], good["w"]))
        self.assertTrue(any(path in m and "checksum mismatch" in m for m in logs.output), logs.output)
        # No valid step left: refused with the file's name.
        os.unlink(os.path.join(self.dirs.ckpt, "1", "rank_0.xtc"))
        with self.assertRaises(CheckpointError) as e:
            fresh().load_checkpoint()
        self.assertIn(path, str(e.exception))
        with self.assertRaisesRegex(xtc.XtcError, "checksum mismatch in entry w"):
            xtc.read_xtc(path)
        inspect = os.path.join(lib.build_dir(), "bin", "xtimer_ckpt")
        p = subprocess.run([inspect, "inspect", self.dirs.ckpt], capture_output=True, text=True)
        self.assertEqual(p.returncode, 1)
        self.assertIn(path, p.stdout)
        self.assertIn("CORRUPT", p.stdout)

    def test_tiny_shm_gives_a_clear_error_before_any_copy(self):
        mnt = tempfile.mkdtemp(prefix="xtimer-ckpt-tinyshm-")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", mnt], capture_output=True, text=True)
        if r.returncode != 0:
            os.rmdir(mnt)
            self.skipTest(f"cannot mount a small tmpfs here (needs root and mount rights): {r.stderr.strip()}")
        try:
            c = Checkpointer(self.dirs.ckpt, shm_dir=mnt, saver=False)
            small = {"w": torch.ones(256 << 10)}  # 1 MiB: two slots of 2 MiB fit
            self.assertTrue(c.save_checkpoint(1, small, storage_type=StorageType.MEMORY))
            big = {"w": torch.ones(4 << 20)}  # 16 MiB: does not fit
            with self.assertRaises(CheckpointError) as e:
                c.save_checkpoint(2, big, storage_type=StorageType.MEMORY)
            msg = str(e.exception)
            self.assertRegex(msg, r"need \d+ bytes .* more in " + mnt + r", \d+ bytes .* available")
            self.assertIn("XTIMER_CKPT_SHM_DIR", msg)
            st = os.statvfs(mnt)
            self.assertLess((st.f_blocks - st.f_bfree) * st.f_frsize, 5 << 20, "space was taken before the error")
            step, got = c.load_checkpoint()  # the previous snapshot is intact
            self.assertEqual(step, 1)
            self.assertTrue(torch.equal(got["w"], small["w"]))
            c.close()
            del c
        finally:
            subprocess.run(["umount", mnt], check=False)
            os.rmdir(mnt)


if __name__ == "__main__":
    unittest.main()
