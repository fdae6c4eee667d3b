#!/usr/bin/env python3
"""End to end: hand-made stack files of the 4-rank hang (rank 2 sleeps in load_batch while 0, 1
and 3 wait in ncclAllReduce #1234), plus bad files, through xtimer_stacktrace_viewer.

usage: e2e_hang_test.py VIEWER WORKDIR
"""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hang_stacks import rank_file, write_hang  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import check, failures  # noqa: E402

VIEWER, WORK = sys.argv[1], sys.argv[2]


def write(d, name, content):
    with open(os.path.join(d, name), "w" if isinstance(content, str) else "wb") as f:
        f.write(content)


def run(args):
    p = subprocess.run([VIEWER] + args, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def folded_rules(path):
    """flamegraph.pl reads `^(.*)\\s+?(\\d+(?:\\.\\d*)?)$` per line and splits the stack on ';'."""
    lines = open(path, encoding="utf-8").read().split("\n")
    check(lines[-1] == "", f"{path}: ends with a newline")
    label = re.compile(r"^[^;@\n]*(@[^;\n]*)?@[^;@|\n]+@[0-9/\-.+]*\|[0-9/\-.+]*$")
    for line in lines[:-1]:
        m = re.match(r"^(.*)\s+?(\d+(?:\.\d*)?)$", line)
        check(m is not None, f"{path}: line parses as flamegraph.pl does: {line!r}")
        if not m:
            continue
        stack, count = m.group(1), m.group(2)
        check(line == stack + " " + count, f"{path}: one space before the count, none trailing: {line!r}")
        check(int(count) >= 1, f"{path}: count is a positive integer: {line!r}")
        check(not re.search(r"[\x00-\x1f\x7f]", stack), f"{path}: no control character: {line!r}")
        for frame in stack.split(";"):
            check(frame != "" and frame == frame.strip(), f"{path}: frame not empty, not padded: {frame!r}")
            check(label.match(frame) is not None, f"{path}: frame is func@source@stuck|leak: {frame!r}")
    return lines[:-1]


shutil.rmtree(WORK, ignore_errors=True)
stacks, out = os.path.join(WORK, "stacks"), os.path.join(WORK, "out")
os.makedirs(stacks)
write_hang(stacks)
# Bad input: each one named on stderr and skipped.
bad = {
    "99990-00004.stacktrace": "",  # empty
    "99991-00004.stacktrace": json.dumps(rank_file(1))[:500],  # truncated
    "99992-00004.stacktrace": b"\x89PNG\r\n\x1a\n\x00\x00garbage",  # corrupt
    "99993-00004.stacktrace": json.dumps(rank_file(3, version=2)),  # newer version
    "99994-00004.stacktrace": json.dumps(rank_file(0)),  # duplicate rank 0
    "99995-00008.stacktrace": json.dumps(rank_file(5, world=8)),  # other world size
}
for name, content in bad.items():
    write(stacks, name, content)
write(stacks, "notes.txt", "not a stack file")
os.mkfifo(os.path.join(stacks, "99996-00004.stacktrace"))  # must not hang the reader
before = sorted(os.listdir(stacks))

code, stdout, stderr = run(["--path", stacks, "--out", out])
print(stdout)
print(stderr)
check(code == 0, f"exit status 0, got {code}")
for name in list(bad) + ["99996-00004.stacktrace"]:
    lines = [l for l in stderr.splitlines() if name in l]
    check(len(lines) == 1, f"{name} named in exactly one line on stderr")
check("newer than this reader" in stderr, "the newer version is said as such")
check("disagrees" in stderr, "the world size disagreement is reported")
check(sorted(os.listdir(stacks)) == before, "nothing written into the input folder")

verdict = json.load(open(os.path.join(out, "verdict.json")))
check(verdict["format"] == "xtimer-verdict", "verdict format")
check(verdict["world_size"] == 4, "world size 4")
check(verdict["ranks_reported"] == [0, 1, 2, 3], "ranks 0-3 reported")
check(verdict["ranks_missing"] == [], "no rank missing")
check([s["rank"] for s in verdict["suspects"]] == [2], f"rank 2 is the only suspect: {verdict['suspects']}")
check(any("load_batch" in f for f in verdict["suspects"][0]["frames"]), "the suspect's frames name load_batch")
check(len(verdict["skipped"]) == 7, f"7 inputs skipped: {verdict['skipped']}")
check(
    any(
        re.match(
            r"^ranks 0-1/3 wait in ncclAllReduce #1234 \(comm 3a9f0c12\); rank 2 is not in it: "
            r"load_batch \(train\.py:88\) <- train_step \(train\.py:140\)",
            l,
        )
        for l in stdout.splitlines()
    ),
    "terminal summary names the collective and rank 2 in load_batch",
)

expected = {"verdict.json"} | {
    f"{k}_stack.{e}" for k in ("py", "cpp") for e in ("folded", "svg", "dot", "graph.svg", "speedscope.json")
}
check(set(os.listdir(out)) == expected, f"exactly the documented files in --out: {sorted(os.listdir(out))}")
py = folded_rules(os.path.join(out, "py_stack.folded"))
cpp = folded_rules(os.path.join(out, "cpp_stack.folded"))
check(
    any(l.endswith("load_batch@/job/train.py:88@2|0-1/3;[holds GIL]@python@2|0-1/3 1") for l in py),
    "py_stack.folded has rank 2 in load_batch, holding the GIL",
)
check(
    any(
        "ncclAllReduce@/usr/lib/libnccl.so.2@0-1/3|2;libnccl.so.2+0x77f0@/usr/lib/libnccl.so.2@0-1/3|2" in l
        for l in cpp
    ),
    "cpp_stack.folded has the NCCL wait with an unsymbolised frame",
)
check(sum(int(l.rsplit(" ", 1)[1]) for l in py) == 4, "python counts add up to 4 ranks")
svg = open(os.path.join(out, "py_stack.svg"), encoding="utf-8").read()
check("load_batch" in svg, "flame graph shows load_batch")
csvg = open(os.path.join(out, "cpp_stack.svg"), encoding="utf-8").read()
check("<script>alert" not in csvg and "&lt;script&gt;alert" in csvg, "labels are escaped in the SVG")
speed = json.load(open(os.path.join(out, "py_stack.speedscope.json")))
check(speed["profiles"][0]["type"] == "sampled" and sum(speed["profiles"][0]["weights"]) == 4, "speedscope file")
dot = open(os.path.join(out, "py_stack.dot")).read()
check("#ffb74d" in dot, "the call tree marks the branch where the ranks split")

# --format chooses; --collapse-idle hides the pool thread.
out2 = os.path.join(WORK, "out2")
code, stdout, stderr = run(["--path", stacks, "--out", out2, "--format", "folded", "--collapse-idle", "--quiet"])
check(code == 0 and stdout == "", f"--quiet run: {code} {stdout!r}")
check(set(os.listdir(out2)) == {"verdict.json", "py_stack.folded", "cpp_stack.folded"}, "--format folded")
check("pthread_cond_wait" not in open(os.path.join(out2, "cpp_stack.folded")).read(), "--collapse-idle")
check("pthread_cond_wait" in open(os.path.join(out, "cpp_stack.folded")).read(), "idle threads shown by default")

# No usable file: non-zero with a clear message.
empty = os.path.join(WORK, "empty")
os.makedirs(empty)
code, stdout, stderr = run(["--path", empty])
check(code == 2 and "no usable stack file" in stderr, f"empty folder: {code} {stderr!r}")
only_bad = os.path.join(WORK, "only_bad")
os.makedirs(only_bad)
write(only_bad, "00000-00001.stacktrace", "{")
code, stdout, stderr = run(["--path", only_bad])
check(
    code == 2 and "00000-00001.stacktrace" in stderr and "no usable stack file" in stderr,
    f"only bad files: {code} {stderr!r}",
)
code, stdout, stderr = run(["--path", os.path.join(WORK, "does-not-exist")])
check(code == 2 and "cannot open folder" in stderr, f"missing folder: {code} {stderr!r}")
code, stdout, stderr = run(["--path", stacks, "--format", "png"])
check(code == 1 and "unknown format" in stderr, f"bad --format: {code} {stderr!r}")
for bad_arg in (["--threads", "x"], ["--threads", "65"], ["--world-size", "-1"], ["--world-size", "1048577"]):
    code, stdout, stderr = run(["--path", stacks] + bad_arg)
    check(code == 1 and bad_arg[0] in stderr, f"bad {bad_arg}: {code} {stderr!r}")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all checks passed")
