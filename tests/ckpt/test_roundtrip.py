"""Round trip of a realistic state dict through memory and through disk, bit-identical; training
continues to the same losses; the NumPy-only reader and `xtimer_ckpt inspect` agree."""
import os
import subprocess
import unittest

import numpy as np
import torch

import ckpt_testlib as lib
from xtimer import _ckpt
from xtimer.ckpt import Checkpointer, StorageType, xtc


class RoundTrip(unittest.TestCase):
    def setUp(self):
        self.dirs = lib.Dirs("roundtrip")

    def tearDown(self):
        self.dirs.cleanup()

    def ckpt(self, shm=None):
        return Checkpointer(self.dirs.ckpt, shm_dir=shm or self.dirs.shm, saver_idle_exit=30)

    def test_memory_and_disk_are_bit_identical(self):
        state = lib.realistic_state()
        c = self.ckpt()
        self.assertEqual(c.load_checkpoint(), (0, None))  # nothing yet
        self.assertTrue(c.save_checkpoint(7, state, storage_type=StorageType.MEMORY))
        step, got = c.load_checkpoint()
        self.assertEqual(step, 7)
        lib.assert_same(self, state, got)
        self.assertFalse(os.path.exists(os.path.join(self.dirs.ckpt, "7")), "a memory save wrote to disk")

        self.assertTrue(c.save_checkpoint(8, state, storage_type=StorageType.DISK))
        c.wait()
        path = os.path.join(self.dirs.ckpt, "8", "rank_0.xtc")
        self.assertTrue(os.path.exists(path))
        with open(os.path.join(self.dirs.ckpt, "latest")) as f:
            self.assertIn('"step":8', f.read())
        # A process on another node: no memory copy, so from disk.
        other = self.ckpt(self.dirs.other_shm())
        step, got = other.load_checkpoint()
        self.assertEqual(step, 8)
        lib.assert_same(self, state, got)

        # The NumPy-only reader: same values; its checksum is the C++ one.
        s, arrays, index = xtc.read_xtc(path)
        self.assertEqual(s, 8)
        w = state["model"]["inner.fc1.weight"].numpy()
        self.assertEqual(arrays["model"]["inner.fc1.weight"].tobytes(), w.tobytes())
        bf = state["model"]["inner.fc2.weight"]
        self.assertEqual(arrays["model"]["inner.fc2.weight"].dtype, np.uint16)  # raw bfloat16 bits
        np.testing.assert_array_equal(xtc.bf16_to_float32(arrays["model"]["inner.fc2.weight"]), bf.float().numpy())
        s2, tensors, _ = xtc.read_xtc(path, as_torch=True)
        lib.assert_same(self, state["model"], tensors["model"])
        data = os.urandom(1001)
        self.assertEqual(xtc.checksum(data), _ckpt.checksum(data))

        inspect = os.path.join(lib.build_dir(), "bin", "xtimer_ckpt")
        p = subprocess.run([inspect, "inspect", self.dirs.ckpt, "--entries"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("inner.fc2.weight", p.stdout)
        self.assertIn("verified", p.stdout)
        p = subprocess.run([inspect, "inspect", self.dirs.shm], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("step 8", p.stdout)

    def test_training_continues_to_the_same_losses(self):
        model = lib.make_model(seed=3)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        lib.train_steps(model, opt, 5, seed=10)
        c = self.ckpt()
        c.save_checkpoint(
            5, {"model": model.state_dict(), "optimizer": opt.state_dict()}, storage_type=StorageType.DISK
        )
        c.wait()
        reference = lib.train_steps(model, opt, 6, seed=11)  # steps 6..11 without a restart
        for shm in (self.dirs.shm, self.dirs.other_shm()):  # from memory, then from disk
            m2 = lib.make_model(seed=99)
            o2 = torch.optim.Adam(m2.parameters(), lr=1e-2)
            step, st = self.ckpt(shm).load_checkpoint()
            self.assertEqual(step, 5)
            m2.load_state_dict(st["model"])
            o2.load_state_dict(st["optimizer"])
            self.assertEqual(lib.train_steps(m2, o2, 6, seed=11), reference)

    def test_a_disk_load_is_private_to_its_process(self):
        """A load from disk views the file mapped copy-on-write: what the job then writes into
        the tensors (an optimizer step in place) never reaches the file, another load gets the
        saved values, and the tensors outlive the file's removal (the keep policy)."""
        state = lib.realistic_state()
        c = self.ckpt()
        c.save_checkpoint(4, state, storage_type=StorageType.DISK)
        c.wait()
        _, got = self.ckpt(self.dirs.other_shm()).load_checkpoint()  # from disk
        w = got["model"]["inner.fc1.weight"]
        saved = w.clone()
        w.add_(1.0)
        path = os.path.join(self.dirs.ckpt, "4", "rank_0.xtc")
        _ckpt.XtcFile(path).verify()  # the file is unchanged: its checksums still hold
        _, again = self.ckpt(self.dirs.other_shm()).load_checkpoint()
        self.assertTrue(torch.equal(again["model"]["inner.fc1.weight"], saved))
        self.assertTrue(torch.equal(w, saved + 1.0))
        os.unlink(path)
        self.assertTrue(torch.equal(again["model"]["inner.fc1.weight"], saved))
        lib.assert_same(
            self,
            {k: v for k, v in state["model"].items() if k != "inner.fc1.weight"},
            {k: v for k, v in again["model"].items() if k != "inner.fc1.weight"},
        )

    def test_unsupported_values_are_named(self):
        c = self.ckpt()
        with self.assertRaisesRegex(TypeError, r"a/b: cannot save a .*object"):
            c.save_checkpoint(1, {"a": {"b": object()}})
        with self.assertRaisesRegex(ValueError, "step"):
            c.save_checkpoint(-1, {})


if __name__ == "__main__":
    unittest.main()
