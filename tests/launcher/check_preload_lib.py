#!/usr/bin/env python3
"""XTIMER_PRELOAD_LIB that is not a preloadable library: xtimer_launch (and xtimer_run, same code) refuses to
start the command, with exit 2 and one line naming the path and what it is (the job ran
untimed before, with only ld.so's warning). The real library still works.

usage: check_preload_lib.py BIN_DIR WORKDIR
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import check, failures  # noqa: E402

BIN, WORK = sys.argv[1], os.path.abspath(sys.argv[2])
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)

text = os.path.join(WORK, "notes.txt")
with open(text, "w") as f:
    f.write("not a library\n")
empty = os.path.join(WORK, "empty.so")
open(empty, "w").close()
program = shutil.which("true")
marker = os.path.join(WORK, "ran")
env0 = {**os.environ, "XTIMER_METRICS_PORT": "0"}
for path, want in [
    (text, "not an ELF file"),
    (empty, "not an ELF file"),
    (WORK, "not a regular file"),
    (program, "a program (a position-independent executable)"),
]:
    if os.path.exists(marker):
        os.remove(marker)
    p = subprocess.run(
        [os.path.join(BIN, "xtimer_launch"), "sh", "-c", f"touch {marker}"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env0, "XTIMER_PRELOAD_LIB": path},
    )
    lines = p.stderr.strip().splitlines()
    check(
        p.returncode == 2
        and len(lines) == 1
        and path in lines[0]
        and want in lines[0]
        and "XTIMER_PRELOAD_LIB" in lines[0],
        f"{path}: exit 2, one line saying '{want}' (rc {p.returncode}: {p.stderr!r})",
    )
    check(not os.path.exists(marker), f"{path}: the command did not run untimed")

# The default library (../lib beside the binary) is accepted and preloaded.
p = subprocess.run(
    [os.path.join(BIN, "xtimer_launch"), "sh", "-c", 'echo "$LD_PRELOAD"'],
    capture_output=True,
    text=True,
    timeout=60,
    env=env0,
)
check(
    p.returncode == 0 and "libxtimer_preload.so" in p.stdout,
    f"the built library is preloaded ({p.stdout!r} {p.stderr!r})",
)
sys.exit(1 if failures else 0)
