#!/usr/bin/env python3
"""Our Python stacks against py-spy's, on the same process (py_spy_target.py: threads in
time.sleep, a C extension, a generator, asyncio and CPU autograd backward, each named).

The target runs under the preloaded library; `py-spy dump --pid --json` reads it from outside,
then the dump signal makes it write its own stack file. Thread by thread (same tid), every frame
py-spy shows must be in ours, in the same order, with the same function, file and line; and the
thread's Python name must be the one py-spy shows. Differences are counted and listed, as the gdb
comparison does for native frames (unwind_gdb_test.cc). On 3.11+ py-spy 0.4.2+ names a function by
its qualified name (co_qualname: Thread.run, f.<locals>.g); CPython's dumper, which ours uses, prints
the plain name (run), and the symboliser adds the qualified one from the source (`qualname`), so the
comparison reads the symbolised file and a frame matches only by the qualified name; one that
matches by its plain name alone is counted as a difference.

With --repeat N it also times both, N times each on the same process: py-spy's whole run (start,
attach, read, print) against ours from the signal to the stack file on disk, plus our in-process
capture time; it prints medians and their ratio (a benchmark: nothing is asserted on times).

  py_spy_compare.py --py-spy PATH --preload LIB [--python /usr/bin/python3] [--repeat N]

Exit 77 (skipped) when py-spy is not installed or may not attach here."""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STACK = "00000-00001.stacktrace"


def skip(why):
    print("SKIP:", why)
    sys.exit(77)


def start_target(args, out):
    env = dict(
        os.environ,
        XTIMER_TIMELINE_PATH=out,
        LD_PRELOAD=args.preload,
        RANK="0",
        WORLD_SIZE="1",
        LOCAL_RANK="0",
        XTIMER_LOG_LEVEL="warn",
        XTIMER_METRICS_PORT="0",
    )
    for k in ("XTIMER_AGENT_SOCKET", "XTIMER_DISABLE", "XTIMER_DUMP_SIGNAL"):
        env.pop(k, None)
    proc = subprocess.Popen(
        [args.python, os.path.join(HERE, "py_spy_target.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    line = proc.stdout.readline().split()
    if not line or line[0] != "ready":
        proc.kill()
        sys.exit("FAIL: the target did not start: %r" % line)
    return proc, line[1] == "1"


def py_spy(args, pid):
    t0 = time.perf_counter()
    r = subprocess.run([args.py_spy, "dump", "--pid", str(pid), "--json"], capture_output=True, text=True, timeout=60)
    took = time.perf_counter() - t0
    if r.returncode != 0:
        if "ermission" in r.stderr or "ptrace" in r.stderr:
            skip("py-spy may not attach here: " + r.stderr.strip().splitlines()[-1])
        sys.exit("FAIL: py-spy dump failed: " + r.stderr.strip())
    return json.loads(r.stdout), took


def our_dump(pid, out):
    """Sends the dump signal; the stack file (unsymbolised is enough) and seconds until it was there."""
    path = os.path.join(out, STACK)
    t0 = time.perf_counter()
    os.kill(pid, signal.SIGUSR2)
    deadline = t0 + 30
    while time.perf_counter() < deadline:
        if os.path.exists(path):
            took = time.perf_counter() - t0
            with open(path) as f:
                return json.load(f), took
        time.sleep(0.0002)
    sys.exit("FAIL: no stack file within 30 s")


def wait_symbolised(out):
    """The symboliser rewrites the file after each dump: its symbolised content (None after 30 s)."""
    path = os.path.join(out, STACK)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            with open(path) as f:
                d = json.load(f)
                if d.get("symbolized"):
                    return d
        except (OSError, ValueError):
            pass
        time.sleep(0.01)
    return None


def same_frame(spy, ours):
    """(equal, only_plain) for py-spy's (name, file, line) against ours (qualname or None, function,
    file, line): equal by either of our names (py-spy before 3.11 prints the plain one); or only by
    the plain name, py-spy's being qualified ("Thread.run" against our "run" without a qualname)."""
    if spy[1:] != ours[2:]:
        return False, False
    if spy[0] in (ours[0], ours[1]):
        return True, False
    if ours[0] is None and spy[0].endswith("." + ours[1]):
        return True, True
    return False, False


def compare(spy, ours, have_torch):
    """Prints the comparison; the number of differences (qualified names apart)."""
    by_tid = {t["tid"]: t for t in ours["threads"]}
    diffs = 0
    frames_total = frames_same = plain = qualified = 0
    for st in spy:
        tid = st.get("os_thread_id")
        name = st.get("thread_name")
        spy_frames = [(f["name"], f["filename"], f["line"]) for f in st["frames"]]  # innermost first
        t = by_tid.get(tid)
        if t is None:
            print(f"DIFF thread {tid} {name!r}: py-spy shows it, our dump lacks it")
            diffs += 1 + len(spy_frames)
            frames_total += len(spy_frames)
            continue
        our_frames = [(f.get("qualname"), f["function"], f["file"], f.get("line")) for f in reversed(t["python"])]
        # Every py-spy frame in ours, in order (ours may have more, e.g. past py-spy's 'shim' frames).
        at = 0
        missing = []
        for fr in spy_frames:
            j = at
            while j < len(our_frames) and not same_frame(fr, our_frames[j])[0]:
                j += 1
            if j < len(our_frames):
                if same_frame(fr, our_frames[j])[1]:
                    plain += 1
                    print(
                        f"DIFF thread {tid} {name!r}: py-spy's {fr[0]} ({fr[1]}:{fr[2]}) "
                        f"is {our_frames[j][1]} in ours"
                    )
                    diffs += 1
                qualified += "." in fr[0]
                at = j + 1
                frames_same += 1
            else:
                near = [o for o in our_frames[at:] if fr[0].split(".")[-1] == o[1] and o[2] == fr[1]]
                missing.append((fr, near[0] if near else None))
        frames_total += len(spy_frames)
        extra = len(our_frames) - (len(spy_frames) - len(missing))
        label = f"thread {tid} {name!r}"
        if t.get("python_name") != name:
            print(f"DIFF {label}: our python_name is {t.get('python_name')!r}")
            diffs += 1
        for fr, near in missing:
            print(
                f"DIFF {label}: py-spy's {fr[0]} ({fr[1]}:{fr[2]}) not in ours"
                + (f" (ours has line {near[3]})" if near else "")
            )
            diffs += 1
        print(
            f"{'ok  ' if not missing else 'DIFF'} {label}: {len(spy_frames)} py-spy frames, "
            f"{len(spy_frames) - len(missing)} found in ours in order, ours has {extra} more"
        )
    named = {st.get("thread_name") for st in spy}
    want = {"MainThread", "sleeper", "c-ext", "generator", "asyncio"} | ({"autograd"} if have_torch else set())
    if not want <= named:
        print("DIFF py-spy did not show every parked thread:", sorted(want - named))
        diffs += 1
    print(f"frames: {frames_same}/{frames_total} of py-spy's found in ours; threads: {len(spy)}; differences: {diffs}")
    print(f"qualified names: py-spy shows {qualified} (co_qualname, Class.method); ours lacks {plain} of them")
    return diffs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--py-spy", required=True)
    ap.add_argument("--preload", required=True)
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--repeat", type=int, default=0)
    args = ap.parse_args()
    if not os.access(args.py_spy, os.X_OK):
        skip(f"no py-spy at {args.py_spy}: install the peers' environment with scripts/setup_peers.sh")
    if not os.path.exists(args.preload):
        sys.exit(f"FAIL: no preloaded library at {args.preload}: build it first")
    out = tempfile.mkdtemp(prefix="xtimer-pyspy-")
    proc, have_torch = start_target(args, out)
    try:
        if not have_torch:
            print(f"note: {args.python} cannot import torch: no autograd thread")
        spy, _ = py_spy(args, proc.pid)
        our_dump(proc.pid, out)
        ours = wait_symbolised(out)  # qualified names are added by the symboliser
        if ours is None:
            sys.exit("FAIL: the stack file was not symbolised within 30 s")
        print("python:", ours["capture"].get("python"), "thread names:", ours["capture"].get("python_thread_names"))
        diffs = compare(spy, ours, have_torch)
        wait_symbolised(out)
        if args.repeat > 0:
            spy_s, our_s, capture_ms = [], [], []
            for _ in range(args.repeat):
                spy_s.append(py_spy(args, proc.pid)[1])
                os.unlink(os.path.join(out, STACK))
                d, took = our_dump(proc.pid, out)
                our_s.append(took)
                capture_ms.append(d["capture"]["duration_ms"])
                wait_symbolised(out)
            ps, us, cm = statistics.median(spy_s) * 1e3, statistics.median(our_s) * 1e3, statistics.median(capture_ms)
            print(
                f"py-spy dump (whole run): median {ps:.1f} ms; ours, signal to stack file: median {us:.1f} ms "
                f"(in-process capture {cm:.2f} ms); {len(ours['threads'])} threads, {args.repeat} runs each"
            )
            print(f"ratio py-spy / ours: {ps / us:.1f}x (to the file), {ps / cm:.1f}x (in-process capture)")
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(out, True)
    if diffs:
        print(f"FAIL: {diffs} difference(s) from py-spy")
        sys.exit(1)
    print("OK")


main()
