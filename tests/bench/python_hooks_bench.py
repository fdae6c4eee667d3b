#!/usr/bin/env python3
"""What xtimer's Python hooks (preload/steps/python/xtimer_pyhooks.py) cost a training process: per
garbage collection (the gc.callbacks pair and one ctypes call into libxtimer_preload.so), per
DataLoader batch (the wrapped __next__), per collective (its call site: the wrapper around
torch.distributed's functions, here around a no-op), at start-up (the sitecustomize), and so per step of a
small torch training loop (its batch and the collections counted in it). Each figure is measured
against the same thing without the hook in the same process (or, for start-up, the same
interpreter without the hook folder), in interleaved rounds; medians are printed. Figures only,
no assertion (label bench).

  python_hooks_bench.py --preload libxtimer_preload.so --site BUILD/lib/xtimer-site --simgpu DIR
                        [--python /usr/bin/python3] [--rounds 7]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import ctypes, gc, json, sys, time
import xtimer_pyhooks as hooks
assert hooks._span is not None, "the hooks are not installed"
# The library takes spans once its tracker runs: make one hooked CUDA call (simulated runtime).
ctypes.CDLL("libcudart.so.13", mode=ctypes.RTLD_GLOBAL)
ctypes.CDLL(None).cudaDeviceSynchronize()
import torch, torch.utils.data
rounds = int(sys.argv[1])

def per_gc(n):
    t = time.perf_counter_ns()
    for _ in range(n):
        gc.collect(0)
    return (time.perf_counter_ns() - t) / n

class Items(torch.utils.data.Dataset):
    def __len__(self): return 1 << 30
    def __getitem__(self, i): return i

cls = torch.utils.data.dataloader._BaseDataLoaderIter
wrapped, plain = cls.__next__, cls.__next__._xtimer_wrapped

def per_next(n):
    it = iter(torch.utils.data.DataLoader(Items(), batch_size=None, num_workers=0))
    t = time.perf_counter_ns()
    for _ in range(n):
        next(it)
    return (time.perf_counter_ns() - t) / n

def per_span(n):
    span, t0 = hooks._span, time.monotonic_ns()
    t = time.perf_counter_ns()
    for _ in range(n):
        span(1, t0, t0)
    return (time.perf_counter_ns() - t) / n

import torch.distributed  # its collectives are wrapped with their call sites (XTIMER_DESYNC=1)
assert hooks._set_site is not None, "the call-site hooks are not installed"
def collective(x):
    return x
with_site = hooks._wrap_with_site(collective, hooks._THREAD_SITE)

def per_call(fn, n):
    t = time.perf_counter_ns()
    for _ in range(n):
        fn(1)
    return (time.perf_counter_ns() - t) / n

def train_step(model, opt, x):
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()

def per_step(n):
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    it = iter(torch.utils.data.DataLoader(torch.randn(1 << 14, 64), batch_size=32, num_workers=0))
    t = time.perf_counter_ns()
    for _ in range(n):
        train_step(model, opt, next(it))
    return (time.perf_counter_ns() - t) / n

out = {"gc_on": [], "gc_off": [], "next_on": [], "next_off": [], "span": [], "step": [], "site_on": [], "site_off": []}
collections = [0]
counter = lambda phase, info: collections.__setitem__(0, collections[0] + (phase == "stop"))
gc.callbacks.append(counter)
c0 = collections[0]
per_step(300)
gcs_per_step = (collections[0] - c0) / 300
gc.callbacks.remove(counter)
for _ in range(rounds):
    out["gc_on"].append(per_gc(20000))
    gc.callbacks.remove(hooks._on_gc)
    out["gc_off"].append(per_gc(20000))
    gc.callbacks.append(hooks._on_gc)
    out["next_on"].append(per_next(20000))
    cls.__next__ = plain
    out["next_off"].append(per_next(20000))
    out["span"].append(per_span(100000))
    out["step"].append(per_step(300))
    out["site_on"].append(per_call(with_site, 100000))
    out["site_off"].append(per_call(collective, 100000))
out["gcs_per_step"] = gcs_per_step
print(json.dumps(out))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preload", required=True)
    ap.add_argument("--site", required=True)
    ap.add_argument("--simgpu", required=True)
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as out:
        env = dict(
            os.environ,
            LD_PRELOAD=args.preload,
            PYTHONPATH=args.site,
            LD_LIBRARY_PATH=args.simgpu,
            XTIMER_TIMELINE_PATH=out,
            XTIMER_REPORT_INTERVAL="0",
        )
        for k in ("XTIMER_AGENT_SOCKET", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
            env.pop(k, None)
        p = subprocess.run(
            [args.python, "-c", CHILD, str(args.rounds)], env=env, capture_output=True, text=True, timeout=900
        )
        if p.returncode != 0:
            sys.exit(f"the measuring process failed: {p.stderr.strip()[-800:]}")
        r = json.loads(p.stdout.strip().splitlines()[-1])
        # Start-up: the interpreter with and without the hook folder on PYTHONPATH (both preloaded).
        start = {"on": [], "off": []}
        for _ in range(args.rounds):
            for key, path in (("on", args.site), ("off", "")):
                t0 = time.perf_counter()
                subprocess.run([args.python, "-c", "pass"], env=dict(env, PYTHONPATH=path))
                start[key].append((time.perf_counter() - t0) * 1e3)
    med = {k: statistics.median(v) for k, v in r.items() if isinstance(v, list)}
    gc_cost = med["gc_on"] - med["gc_off"]
    next_cost = med["next_on"] - med["next_off"]
    print(f"Python hooks, {args.python}, median of {args.rounds} rounds:")
    print(
        f"  gc.collect(0): {med['gc_off']:.0f} ns without the hook, {med['gc_on']:.0f} ns with it: "
        f"{gc_cost:.0f} ns per collection"
    )
    print(
        f"  DataLoader __next__ (a trivial dataset): {med['next_off']:.0f} ns without, {med['next_on']:.0f} ns "
        f"with: {next_cost:.0f} ns per batch"
    )
    print(f"  one xtimer_python_span ctypes call: {med['span']:.0f} ns")
    print(
        f"  a collective's call site (frame walk, two ctypes calls): {med['site_off']:.0f} ns a plain call, "
        f"{med['site_on']:.0f} ns wrapped: {med['site_on'] - med['site_off']:.0f} ns per collective"
    )
    # A whole step's difference drowns in a shared machine's noise (a step is ~1 ms); its cost is
    # its spans': one DataLoader batch and the collections that happened in it.
    per_step_ns = gc_cost * r["gcs_per_step"] + next_cost
    print(
        f"  a small torch training step (DataLoader batch, forward, backward, SGD): {med['step'] / 1e3:.1f} us, "
        f"{r['gcs_per_step']:.2f} collections per step: the hooks add {per_step_ns:.0f} ns "
        f"({per_step_ns / med['step']:.3%}); a step with 10 collections: "
        f"{(10 * gc_cost + next_cost) / 1e3:.1f} us"
    )
    print(
        f"  interpreter start-up with the hook folder: {statistics.median(start['on']):.1f} ms, without: "
        f"{statistics.median(start['off']):.1f} ms"
    )


if __name__ == "__main__":
    main()
