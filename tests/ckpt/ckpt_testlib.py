"""Helpers for the xtimer.ckpt Python tests: temporary folders, a realistic state dict, a
strict bit-level comparison, and stopping the saver a test started."""
import collections
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


class Dirs:
    """A shared-memory folder on /dev/shm and a checkpoint folder on the disk."""

    def __init__(self, tag):
        self.shm = tempfile.mkdtemp(prefix=f"xtimer-ckpt-py-{tag}-", dir="/dev/shm")
        self.root = tempfile.mkdtemp(prefix=f"xtimer-ckpt-py-{tag}-")
        self.ckpt = os.path.join(self.root, "ckpt")
        self.extra = []

    def other_shm(self):
        """Another, empty shared-memory folder: a process that has no memory copy."""
        d = tempfile.mkdtemp(prefix="xtimer-ckpt-py-other-", dir="/dev/shm")
        self.extra.append(d)
        return d

    def cleanup(self):
        for d in [self.shm] + self.extra:
            stop_saver(d)
            shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)


def stop_saver(shm_dir, timeout=10):
    """Stops the saver this test started for shm_dir (its pid is in the lock file)."""
    path = os.path.join(shm_dir, "xtimer-ckpt-saver.lock")
    try:
        with open(path) as f:
            pid = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    end = time.time() + timeout
    while time.time() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def make_model(seed=0):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(
        collections.OrderedDict(
            [
                ("fc1", torch.nn.Linear(32, 64)),
                ("act", torch.nn.GELU()),
                ("norm", torch.nn.LayerNorm(64)),
                ("fc2", torch.nn.Linear(64, 8)),
            ]
        )
    )
    m.fc2.to(torch.bfloat16)  # part of the model in bfloat16

    class Mixed(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            h = self.inner.norm(self.inner.act(self.inner.fc1(x)))
            return self.inner.fc2(h.to(torch.bfloat16)).float()

    return Mixed(m)


def train_steps(model, opt, n, seed):
    """n deterministic training steps; returns the losses (exact floats)."""
    g = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(n):
        x = torch.randn(16, 32, generator=g)
        y = torch.randn(16, 8, generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def realistic_state(step=7):
    """An nn.Module's weights (float32 + bfloat16), Adam state, a non-contiguous view, scalars,
    strings and other plain values."""
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    train_steps(model, opt, 3, seed=1)
    big = torch.arange(60, dtype=torch.float64).reshape(6, 10)
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "view": big[1:5, ::3].t(),  # non-contiguous
        "expanded": torch.tensor([1.5, 2.5]).expand(3, 2),  # zero stride
        "scalar_tensor": torch.tensor(3, dtype=torch.int64),
        "bools": torch.tensor([True, False, True]),
        "complex": torch.randn(3, dtype=torch.complex64),
        "half": torch.randn(5, dtype=torch.float16),
        "empty": torch.empty(0, 4),
        "param": torch.nn.Parameter(torch.ones(2, 2)),
        "np": np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2],
        "step": step,
        "lr": 1e-3,
        "nan": float("nan"),
        "inf": float("-inf"),
        "huge": 2**80,
        "name": "run-äöü",
        "bytes": b"\x00\xff",
        "nothing": None,
        "flag": True,
        "history": [1, 2.5, "three", (4, 5), {"six": 6}],
        7: "int key",
        "dtype": torch.bfloat16,
        "device": torch.device("cpu"),
        "size": torch.Size([2, 3]),
        "npscalar": np.float32(1.25),
    }


def assert_same(tc, a, b, path="state"):
    """Same structure, types, dtypes, shapes, devices and bytes."""
    tc.assertIs(type(a), type(b), path)
    if isinstance(a, torch.Tensor):
        tc.assertEqual(a.dtype, b.dtype, path)
        tc.assertEqual(tuple(a.shape), tuple(b.shape), path)
        tc.assertEqual(a.device, b.device, path)
        if isinstance(a, torch.nn.Parameter):
            tc.assertEqual(a.requires_grad, b.requires_grad, path)
        ab = a.detach().contiguous().reshape(-1).view(torch.uint8) if a.numel() else a.new_empty(0)
        bb = b.detach().contiguous().reshape(-1).view(torch.uint8) if b.numel() else b.new_empty(0)
        tc.assertTrue(torch.equal(ab, bb), f"{path}: bytes differ")
    elif isinstance(a, np.ndarray):
        tc.assertEqual(a.dtype, b.dtype, path)
        tc.assertEqual(a.shape, b.shape, path)
        tc.assertEqual(np.ascontiguousarray(a).tobytes(), np.ascontiguousarray(b).tobytes(), path)
    elif isinstance(a, dict):
        tc.assertEqual(list(a.keys()), list(b.keys()), path)
        for k in a:
            assert_same(tc, a[k], b[k], f"{path}[{k!r}]")
        tc.assertEqual(getattr(a, "_metadata", None), getattr(b, "_metadata", None), f"{path}._metadata")
    elif isinstance(a, (list, tuple)):
        tc.assertEqual(len(a), len(b), path)
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(tc, x, y, f"{path}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        tc.assertTrue(math.isnan(b), path)
    elif isinstance(a, np.generic):
        tc.assertEqual(a.dtype, b.dtype, path)
        tc.assertEqual(a.tobytes(), b.tobytes(), path)
    else:
        tc.assertEqual(a, b, path)


def run_python(code, env=None, timeout=120, check=True):
    """Runs `code` in a fresh interpreter with this one's PYTHONPATH."""
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"child failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def build_dir():
    """<build> from PYTHONPATH=<build>/lib/python."""
    import xtimer

    return os.path.normpath(os.path.join(os.path.dirname(xtimer.__file__), "..", "..", ".."))
