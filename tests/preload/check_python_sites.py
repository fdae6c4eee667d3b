#!/usr/bin/env python3
"""The Python call sites of collectives (preload/steps/python/xtimer_pyhooks.py): under the
preloaded library, torch.distributed's collectives and torch.autograd.backward are wrapped, and
each wrapper sets in the library the innermost frame outside torch and xtimer for the call's
duration, then puts back what was there.

A child on a one-rank gloo group (Debian's CPU torch: no GPU, so the library's NCCL hook is not
reached; the sites it would read are what the wrappers set) records every set the wrappers make.
Checked: an all-reduce in a user function names that function and line; a collective that calls
another (all_gather_object) keeps the outer call's site and restores it; backward sets the
process-wide site; every set is undone when the call returns, also when it raises; signatures are
kept; with XTIMER_DESYNC=0 nothing is wrapped.

  check_python_sites.py --preload LIB --site DIR [--python PYTHON]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, sys, inspect
import xtimer_pyhooks as h
import torch
import torch.distributed as dist

if os.environ["XTIMER_DESYNC"] == "0":
    print(json.dumps({"wrapped": hasattr(dist.all_reduce, "_xtimer_wrapped")}))
    sys.exit(0)
calls = []
real = h._set_site
def recording(which, site):
    calls.append((which, site))
    return real(which, site)
h._set_site = recording
names = {}
def text(site):
    for (code, line), s in h._site_ids.items():
        if s == site:
            return f"{code.co_name}:{line}"
    return None

dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)

def clip_grads(t):
    dist.all_reduce(t)  # SITE_ALL_REDUCE

def gather_objects():
    out = [None]
    dist.all_gather_object(out, {"a": 1})  # SITE_OBJECTS
    return out

def failing():
    dist.broadcast(torch.ones(2), src=5)  # SITE_FAILING

clip_grads(torch.ones(4))
first = list(calls)
calls.clear()
gather_objects()
objects = list(calls)
calls.clear()
w = torch.ones(3, requires_grad=True)
(w * 2).sum().backward()  # SITE_BACKWARD
backward = list(calls)
calls.clear()
try:
    failing()
except Exception:
    pass
raised = list(calls)
print(json.dumps({
    "wrapped": hasattr(dist.all_reduce, "_xtimer_wrapped"),
    "same_object": dist.all_reduce is dist.distributed_c10d.all_reduce,
    "signature": str(inspect.signature(dist.all_reduce)),
    "first": [(w, text(s)) for w, s in first],
    "objects": [(w, text(s)) for w, s in objects],
    "backward": [(w, text(s)) for w, s in backward],
    "raised": [(w, text(s)) for w, s in raised],
}))
dist.destroy_process_group()
"""


def line_of(source, marker):
    for n, line in enumerate(source.splitlines(), 1):
        if marker in line:
            return n
    raise AssertionError(marker)


def run(args, tmp, desync):
    child = os.path.join(tmp, "child.py")
    with open(child, "w") as f:
        f.write(CHILD)
    env = dict(os.environ)
    env.update(LD_PRELOAD=args.preload, PYTHONPATH=args.site, XTIMER_DESYNC=desync, XTIMER_PYTHON_HOOKS="1")
    store = os.path.join(tmp, f"store-{desync}")
    p = subprocess.run([args.python, child, store], env=env, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        sys.exit(f"FAIL: the child exited {p.returncode}:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preload", required=True)
    ap.add_argument("--site", required=True)
    ap.add_argument("--python", default="/usr/bin/python3")
    args = ap.parse_args()
    failures = []

    def check(ok, what):
        print(("ok  " if ok else "FAIL") + " " + what)
        if not ok:
            failures.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        got = run(args, tmp, "1")
        off = run(args, tmp, "0")
    lines = {m: line_of(CHILD, m) for m in ("SITE_ALL_REDUCE", "SITE_OBJECTS", "SITE_BACKWARD", "SITE_FAILING")}
    print(json.dumps(got))
    check(got["wrapped"] and got["same_object"], "dist.all_reduce is wrapped, in torch.distributed and in c10d")
    check(got["signature"].startswith("(tensor, op="), f"the signature is kept: {got['signature']}")
    thread, backward = 0, 1
    check(
        got["first"] == [[thread, f"clip_grads:{lines['SITE_ALL_REDUCE']}"], [thread, None]],
        "all_reduce sets clip_grads' line on the thread, then puts back none",
    )
    outer = f"gather_objects:{lines['SITE_OBJECTS']}"
    check(
        len(got["objects"]) >= 4
        and got["objects"][0] == [thread, outer]
        and all(c == [thread, outer] for c in got["objects"][1:-1])
        and got["objects"][-1] == [thread, None],
        "all_gather_object's inner collectives keep the outer call's site and restore it",
    )
    check(
        got["backward"] == [[backward, f"<module>:{lines['SITE_BACKWARD']}"], [backward, None]],
        "backward sets the process-wide site for its duration",
    )
    check(
        got["raised"] == [[thread, f"failing:{lines['SITE_FAILING']}"], [thread, None]],
        "a collective that raises still puts the site back",
    )
    check(off["wrapped"] is False, "XTIMER_DESYNC=0: nothing is wrapped")
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")


if __name__ == "__main__":
    main()
