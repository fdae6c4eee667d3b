#!/usr/bin/env python3
"""The CUPTI timing backend on the simulated runtime (with its libcupti.so.13).

Runs tests/preload/cupti_workload under xtimer_launch and checks the summary:

  check_cupti.py CHECK --bin BUILD/bin --workload PATH --simgpu DIR
  CHECK: every-path | event-pairs | slot-taken | profiler-later
    every-path   CUPTI mode: kernels launched through the runtime, a dlsym'd cuLaunchKernelEx (as
                 Triton does), cuGetProcAddress and a CUDA graph replay are all counted and timed
    event-pairs  XTIMER_CUPTI=0: event pairs, said once; the dlsym'd launches stay invisible
    slot-taken   the program holds CUPTI's subscriber slot first: event pairs run and say so
    profiler-later  a profiler comes after xtimer took CUPTI (as torch.profiler's Kineto does
                 mid-job), while another thread launches: its subscribe and activity calls succeed
                 and its own records count every kernel it profiled; xtimer hands CUPTI over,
                 says so once, and times the hooked launches after it with event pairs
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import check, failures  # noqa: E402

# name -> (launches, ms)
HOOKED = {"cupti_runtime_kernel": (5, 4), "cupti_proc_kernel": (7, 2)}
UNHOOKED = {"cupti_triton_kernel": (10, 3), "cupti_graph_kernel": (4, 6)}


def run(args, out, mode, cupti=None, launch=True, **extra_env):
    env = dict(os.environ, LD_LIBRARY_PATH=args.simgpu, XTIMER_TIMELINE_PATH=out, **extra_env)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LD_PRELOAD", "XTIMER_CUPTI"):
        env.pop(k, None)
    if cupti is not None:
        env["XTIMER_CUPTI"] = cupti
    cmd = ([os.path.join(args.bin, "xtimer_launch")] if launch else []) + [args.workload, mode]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        print(f"command failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p


def summary(out):
    with open(os.path.join(out, "00000-00001.summary.json")) as f:
        return json.load(f)


def op(s, name):
    return next((o for o in s["ops"] if o["name"] == name), None)


def check_timed(s, name, n, ms):
    o = op(s, name)
    check(
        o is not None and o["kind"] == "kernel" and o["count"] == n and o["launches"] == n,
        f"{name}: {n} launches counted and timed ({o and (o['count'], o['launches'])})",
    )
    if o:
        p50 = o["p50_us"] / 1e3
        check(abs(p50 - ms) <= 0.10 * ms, f"{name}: p50 {p50:.3f} ms within 10% of {ms} ms")


def check_output(args, mode, p):
    with tempfile.TemporaryDirectory() as bare:
        q = run(args, bare, mode, launch=False)
    check(
        p.returncode == 0 and q.returncode == 0 and p.stdout == q.stdout,
        f"same output with and without xtimer ({p.stdout.strip()!r})",
    )


def fallback_lines(p):
    return [line for line in p.stderr.splitlines() if "CUPTI not used" in line]


def check_every_path(args):
    with tempfile.TemporaryDirectory() as out:
        p = run(args, out, "launches", XTIMER_TRACE="200")
        check_output(args, "launches", p)
        s = summary(out)
        check(s.get("timing_mode") == "cupti", f"timing_mode is cupti ({s.get('timing_mode')})")
        check(not fallback_lines(p), "no fallback line in the log")
        for name, (n, ms) in {**HOOKED, **UNHOOKED}.items():
            check_timed(s, name, n, ms)
        g = op(s, "cudaGraphLaunch")
        check(g is not None and g["count"] == 4, "the graph launches keep their own op (in flight for the watchdog)")
        check(op(s, "cudaMemcpyAsync DtoH") is not None, "the async copy is timed from its record")
        check(op(s, "cudaMemsetAsync") is not None, "the memset is timed from its record")
        kernels = sum(o["count"] for o in s["ops"] if o["kind"] == "kernel" and o["name"] != "cudaGraphLaunch")
        check(kernels == 5 + 10 + 7 + 4, f"no kernel counted twice ({kernels})")
        check(s["untimed"].get("cupti_dropped") == 0, "no CUPTI record dropped")
        with open(os.path.join(out, "00000-00001.trace.json")) as f:
            trace = json.load(f)
        tracks = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
        # Everything ran on one stream: the graph launches (event pairs) and the kernels, copies
        # and memsets (records) share its track, named by the stream's handle.
        check(len(tracks) == 1, f"one trace track for the one stream ({sorted(tracks)})")


def check_event_pairs(args):
    with tempfile.TemporaryDirectory() as out:
        p = run(args, out, "launches", cupti="0")
        check(p.returncode == 0, "workload ran with XTIMER_CUPTI=0")
        s = summary(out)
        check(
            s.get("timing_mode") == "event_pairs" and s.get("timing_note") == "XTIMER_CUPTI=0",
            f"timing_mode event_pairs, note XTIMER_CUPTI=0 ({s.get('timing_mode')}, {s.get('timing_note')})",
        )
        lines = fallback_lines(p)
        check(len(lines) == 1 and "XTIMER_CUPTI=0" in lines[0], f"said once in the log: {lines}")
        for name, (n, ms) in HOOKED.items():
            check_timed(s, name, n, ms)
        check(op(s, "cupti_triton_kernel") is None, "event pairs do not see a dlsym'd cuLaunchKernelEx (why CUPTI)")
        check(op(s, "cupti_graph_kernel") is None, "... nor the kernels of a graph replay, only the launch")


def check_slot_taken(args):
    with tempfile.TemporaryDirectory() as out:
        p = run(args, out, "subscribe-first")
        check_output(args, "subscribe-first", p)
        s = summary(out)
        note = s.get("timing_note", "")
        check(
            s.get("timing_mode") == "event_pairs" and "subscriber" in note,
            f"timing_mode event_pairs, the note names the subscriber ({s.get('timing_mode')}, {note!r})",
        )
        lines = fallback_lines(p)
        check(len(lines) == 1 and "subscriber" in lines[0], f"said once in the log: {lines}")
        for name, (n, ms) in HOOKED.items():
            check_timed(s, name, n, ms)


def handover_lines(p):
    return [line for line in p.stderr.splitlines() if "CUPTI handed over" in line]


def check_profiler_later(args):
    with tempfile.TemporaryDirectory() as out:
        p = run(args, out, "profiler-later")
        check_output(args, "profiler-later", p)
        check(
            "cupti_runtime_kernel 5, cupti_triton_kernel 10, cupti_thread_kernel seen" in p.stdout,
            f"the profiler's own records hold every kernel it profiled ({p.stdout.strip()!r})",
        )
        s = summary(out)
        note = s.get("timing_note", "")
        check(
            s.get("timing_mode") == "event_pairs" and "handed over" in note and "cuptiSubscribe" in note,
            f"timing_mode event_pairs, the note says CUPTI was handed over ({s.get('timing_mode')}, {note!r})",
        )
        lines = handover_lines(p)
        check(len(lines) == 1 and "cuptiSubscribe" in lines[0], f"said once in the log: {lines}")
        check(not fallback_lines(p), "no start-up fallback line: CUPTI ran first")
        # 5 timed from CUPTI records before the hand-over (a class by name), 5 with event pairs
        # after it (a class by function): two rows of one name, none counted twice.
        rows = [o for o in s["ops"] if o["name"] == "cupti_runtime_kernel"]
        check(
            sorted(o["count"] for o in rows) == [5, 5] and all(abs(o["p50_us"] / 1e3 - 4) <= 0.4 for o in rows),
            f"cupti_runtime_kernel: 5 launches timed from records, 5 with event pairs, 4 ms each "
            f"({[(o['count'], o['p50_us']) for o in rows]})",
        )
        # Launched around the hooks: seen by CUPTI before the hand-over only.
        check_timed(s, "cupti_triton_kernel", 10, 3)
        check_timed(s, "cupti_graph_kernel", 4, 6)
        t = op(s, "cupti_thread_kernel")
        check(t is not None and t["count"] >= 1, f"the other thread's launches are timed ({t and t['count']})")
        mm = [o for o in s["ops"] if o["name"] == "cudaGraphLaunch"]
        check(len(mm) == 1 and mm[0]["count"] == 4, "the graph launches keep their op")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check")
    ap.add_argument("--bin", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--simgpu", required=True)
    args = ap.parse_args()
    {
        "every-path": check_every_path,
        "event-pairs": check_event_pairs,
        "slot-taken": check_slot_taken,
        "profiler-later": check_profiler_later,
    }[args.check](args)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
