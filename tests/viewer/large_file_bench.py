#!/usr/bin/env python3
"""Peak memory of the viewer on one large stack file, against a baseline taken
in the same run: reading that file whole with the ordinary reader (what the viewer did first before
large files were read thread by thread into the merge). The viewer's whole run, merge and every
output included, should cost less than that first step alone did.

usage: large_file_bench.py VIEWER MERGE_BENCH [--threads 50000] [--native 30] [--dir DIR]
Prints the figures and the ratio; exits 1 only when a program fails (never on a figure).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("viewer")
ap.add_argument("merge_bench")
ap.add_argument("--threads", type=int, default=50000)
ap.add_argument("--native", type=int, default=30)
ap.add_argument("--dir")
a = ap.parse_args()

work = a.dir or tempfile.mkdtemp(prefix="xtimer_large_file_bench.")
stacks, out = os.path.join(work, "stacks"), os.path.join(work, "out")
subprocess.run(
    [
        sys.executable,
        os.path.join(here, "many_threads.py"),
        stacks,
        "--threads",
        str(a.threads),
        "--native",
        str(a.native),
        "--python",
        "2",
        "--unsymbolized",
    ],
    check=True,
    stdout=subprocess.DEVNULL,
)
(name,) = [n for n in os.listdir(stacks) if n.endswith(".stacktrace")]
size_mb = os.path.getsize(os.path.join(stacks, name)) / 1e6


def peak(cmd):
    """Runs cmd; returns (peak RSS in MB, wall seconds) of that process alone."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"large_file_bench: {' '.join(cmd)} failed ({os.waitstatus_to_exitcode(status)})")
    return usage.ru_maxrss / 1024, time.monotonic() - t0


print(f"one stack file: {size_mb:.1f} MB, {a.threads} distinct threads x {a.native} native frames")
base, base_s = peak([a.merge_bench, "--parse-whole", os.path.join(stacks, name)])
print(f"baseline, the file read whole (ReadStackFile), nothing merged: peak RSS {base:.0f} MB, {base_s:.1f} s")
for fmt in ["svg,folded,dot,speedscope", "folded"]:
    shutil.rmtree(out, ignore_errors=True)
    mb, s = peak([a.viewer, "--path", stacks, "--out", out, "--quiet", "--format", fmt])
    print(
        f"viewer --format {fmt}: peak RSS {mb:.0f} MB, {s:.1f} s; {mb / base:.2f}x the baseline, "
        f"{mb / size_mb:.1f}x the file"
    )
print("goal: the whole viewer run under the baseline:", "met" if mb / base < 1 else "NOT met")
if not a.dir:
    shutil.rmtree(work, ignore_errors=True)
