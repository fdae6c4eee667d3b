#!/usr/bin/env python3
"""End-to-end checks of libxtimer_preload.so on the simulated GPU runtime.

Runs tests/preload/timing_workload (linked against the real CUDA toolkit) under xtimer_launch
with LD_LIBRARY_PATH pointing at the simulated libraries, and checks the summary files.

  check_preload.py CHECK --bin BUILD/bin --workload PATH --simgpu DIR
  CHECK: kernels | gemm | nccl | same-results | no-cuda | bad-output | one-event
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import check, failures  # noqa: E402


def within(value, want, rel):
    return value is not None and abs(value - want) <= rel * want


def run(cmd, env, timeout=120):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        print(f"command failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p


def base_env(args, out):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = args.simgpu
    env["XTIMER_TIMELINE_PATH"] = out
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LD_PRELOAD"):
        env.pop(k, None)
    return env


def summary(out, name="00000-00001.summary.json"):
    path = os.path.join(out, name)
    with open(path) as f:
        s = json.load(f)
    assert s["format"] == "xtimer-summary" and s["version"] == 1, path
    return s


def op(s, name, **fields):
    for o in s["ops"]:
        if o["name"] == name and all(o.get(k) == v for k, v in fields.items()):
            return o
    return None


def check_kernels(args):
    with tempfile.TemporaryDirectory() as out:
        env = base_env(args, out)
        env["XTIMER_TRACE"] = "50"
        p = run([args.launch, args.workload, "kernels"], env)
        check(p.returncode == 0, "workload ran under xtimer_launch")
        s = summary(out)
        check(s["final"] is True, "summary written at exit (final)")
        want = "event_pairs" if os.environ.get("XTIMER_CUPTI") == "0" else "cupti"
        check(s.get("timing_mode") == want, f"timing mode {s.get('timing_mode')} (want {want})")
        for name, ms, n in (("xt_sleep_2ms", 2, 30), ("xt_sleep_5ms", 5, 20), ("xt_sleep_20ms", 20, 10)):
            o = op(s, name)
            check(o is not None and o["kind"] == "kernel" and o["count"] == n, f"{name}: {n} timed launches")
            if o:
                check(
                    within(o["p50_us"] / 1e3, ms, 0.10), f"{name}: p50 {o['p50_us'] / 1e3:.3f} ms within 10% of {ms} ms"
                )
        o = op(s, "xt_proc_address_kernel")
        check(o is not None and o["count"] == 7, "7 launches through cuGetProcAddress counted")
        if o:
            check(within(o["p50_us"] / 1e3, 3, 0.10), f"cuGetProcAddress kernel p50 {o['p50_us'] / 1e3:.3f} ms ~ 3 ms")
        o = op(s, "xt_driver_kernel")
        check(o is not None and o["count"] == 5, "5 direct cuLaunchKernel launches counted")
        o = op(s, "xt_add")
        check(o is not None and o["count"] == 100, "100 small kernels counted")
        check(
            op(s, "cudaMemcpyAsync HtoD") is not None and op(s, "cudaMemcpyAsync DtoH") is not None,
            "async copies timed by direction",
        )
        # Kernels launched by the runtime reach the driver too: nothing may be counted twice.
        total = sum(o["count"] for o in s["ops"] if o["kind"] == "kernel")
        check(total == 30 + 20 + 10 + 5 + 7 + 100, f"no double counting across runtime and driver hooks ({total})")
        with open(os.path.join(out, "00000-00001.trace.json")) as f:
            trace = json.load(f)
        xs = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
        check(len(xs) == 50, f"trace keeps the last 50 ops ({len(xs)})")
        names = [e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"]
        check(any("stream" in n for n in names), "trace has one named track per stream")
        starts = [e["ts"] for e in xs]
        check(starts == sorted(starts), "trace events of one stream are in time order")
        ok = all(b["ts"] >= a["ts"] + a["dur"] - 50 for a, b in zip(xs, xs[1:]))
        check(ok, "ops of one stream do not overlap on the timeline (GPU start times placed correctly)")


def check_gemm(args):
    with tempfile.TemporaryDirectory() as out:
        env = base_env(args, out)
        env["SIMGPU_TFLOPS"] = "50"
        p = run([args.launch, args.workload, "gemm"], env)
        check(p.returncode == 0, "workload ran under xtimer_launch")
        s = summary(out)
        o = op(s, "cublasGemmEx", m=4096, n=4096, k=4096, batch=1)
        check(o is not None and o["kind"] == "matmul" and o["count"] == 20, "cublasGemmEx 4096^3 timed 20 times")
        if o:
            check(within(o["tflops"], 50, 0.10), f"GemmEx reports {o['tflops']:.1f} TFLOPS at SIMGPU_TFLOPS=50")
        o = op(s, "cublasLtMatmul", m=8192, n=4096, k=2048)
        check(o is not None and o["count"] == 10, "cublasLtMatmul shape read from layouts and TRANSA")
        if o:
            check(within(o["tflops"], 50, 0.10), f"cublasLtMatmul reports {o['tflops']:.1f} TFLOPS")
        kernels = [o for o in s["ops"] if o["kind"] == "kernel"]
        check(not kernels, "cuBLAS's own kernel launches are not counted again as kernels")


def run_ranks(args, out, world, with_launch):
    env = base_env(args, out)
    idfile = os.path.join(out, "nccl.id")
    cmd = ([args.launch] if with_launch else []) + [args.workload, "nccl"]
    procs = [
        subprocess.Popen(
            cmd + [str(r), str(world), idfile], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for r in range(world)
    ]
    outs = [p.communicate(timeout=180) for p in procs]
    codes = [p.returncode for p in procs]
    if any(codes):
        print(outs)
    return codes, [o[0] for o in outs]


def check_nccl(args):
    world = 4
    with tempfile.TemporaryDirectory() as out:
        codes, _ = run_ranks(args, out, world, True)
        check(codes == [0] * world, "4 ranks completed their allreduce and ring")
        # No RANK/WORLD_SIZE in the environment: rank and world come from the communicator.
        files = sorted(os.path.basename(f) for f in glob.glob(os.path.join(out, "*.summary.json")))
        want = [f"{r:05d}-{world:05d}.summary.json" for r in range(world)]
        check(files == want, f"rank and world from the NCCL communicator: {files}")
        comm_ids = set()
        for r in range(world):
            s = summary(out, f"{r:05d}-{world:05d}.summary.json")
            o = op(s, "ncclAllReduce")
            check(
                o is not None and o["kind"] == "collective" and o["count"] == 5 and o["bytes"] == 64 << 20,
                f"rank {r}: 5 allreduces of 64 MiB",
            )
            if not o:
                continue
            comm_ids.add(o["comm"])
            algbw = o["bytes"] * o["count"] / (o["total_ms"] / 1e3) / 1e9
            check(within(o["algbw_gbps"], algbw, 0.01), f"rank {r}: algbw {o['algbw_gbps']:.2f} GB/s = bytes / time")
            check(
                within(o["busbw_gbps"], o["algbw_gbps"] * 2 * (world - 1) / world, 0.001),
                f"rank {r}: busbw = algbw * 2(n-1)/n",
            )
            ring = op(s, "ncclGroup")
            check(
                ring is not None
                and ring["kind"] == "p2p"
                and ring.get("group_size") == 2
                and ring["bytes"] == 2 * 4096,
                f"rank {r}: grouped send+recv timed as one p2p op of 8 KiB",
            )
        check(len(comm_ids) == 1, f"all ranks agree on the communicator id {comm_ids}")


def check_same_results(args):
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        for mode in ("kernels", "gemm"):
            pa = run([args.launch, args.workload, mode], base_env(args, a))
            pb = run([args.workload, mode], base_env(args, b))
            check(
                pa.returncode == pb.returncode == 0 and pa.stdout == pb.stdout,
                f"{mode}: same output with and without xtimer ({pa.stdout.strip()!r})",
            )
        ca, oa = run_ranks(args, a, 3, True)
        cb, ob = run_ranks(args, b, 3, False)
        check(ca == cb == [0, 0, 0] and oa == ob, "nccl: same results with and without xtimer")
        check(not glob.glob(os.path.join(b, "*.json")), "without xtimer nothing is written")


def check_no_cuda(args):
    with tempfile.TemporaryDirectory() as out:
        env = base_env(args, out)
        env.pop("LD_LIBRARY_PATH")
        for cmd in (["python3", "-c", "pass"], ["ls", "/"], ["python3", "-c", "import ctypes, json; print(1)"]):
            p = run([args.launch] + cmd, env)
            check(p.returncode == 0 and "error" not in p.stderr, f"{' '.join(cmd)} works under xtimer_launch")
        check(os.listdir(out) == [], "no CUDA call: nothing started, nothing written")


def check_bad_output(args):
    with tempfile.TemporaryDirectory():
        env = base_env(args, "/proc/xtimer-cannot-write-here")
        env["XTIMER_REPORT_INTERVAL"] = "0.2"  # several attempts, still one line
        p = run([args.launch, args.workload, "kernels"], env)
        check(p.returncode == 0 and "5050" in p.stdout, "an unwritable XTIMER_TIMELINE_PATH does not hurt the job")
        lines = [l for l in p.stderr.splitlines() if "cannot write reports" in l]
        check(len(lines) == 1, f"... and is said once, naming the variable: {lines}")
        check(bool(lines) and "XTIMER_TIMELINE_PATH" in lines[0], "... the line says what to set")


def check_one_event(args):
    """Event-pair mode times a plain kernel by its end event alone; its GPU start is derived
    (preload/one_event.h). Durations and GPU starts must come out as with a start event: a kernel
    queued behind another or behind a matmul starts at its end, one launched on an idle stream
    when it is launched. Run with one event and with XTIMER_KERNEL_START_EVENT=1 (both events).

    Every bound holds however late a thread runs: the simulated device clock does not count a
    worker's wait for a CPU (tests/simgpu/README.md, "Device clock"), and what the host's own
    latency adds to a kernel launched on an idle stream is bounded by the launch call's duration,
    which the workload prints (the kernel was issued, and began, between its BEFORE and AFTER)."""
    # A GPU time placed on the host clock is off by up to half a base record call
    # (preload/gpu_clock.cc, kMaxRecordNs 200 us).
    place_us = 100
    for start_event in ("0", "1"):
        mode = "one event" if start_event == "0" else "start event too"
        with tempfile.TemporaryDirectory() as out:
            env = base_env(args, out)
            env.update(XTIMER_CUPTI="0", XTIMER_TRACE="200", XTIMER_KERNEL_START_EVENT=start_event, SIMGPU_TFLOPS="1")
            p = run([args.launch, args.workload, "chain"], env)
            check(p.returncode == 0 and "chain ok" in p.stdout, f"{mode}: workload ran under xtimer_launch")
            s = summary(out)
            check(s.get("timing_mode") == "event_pairs", f"{mode}: timing mode {s.get('timing_mode')}")
            missed = {k: v for k, v in s["untimed"].items() if v}
            check(not missed, f"{mode}: every launch timed (untimed: {missed})")
            want_ms = {"xt_first_8ms": 8, "xt_queued_4ms": 4, "xt_after_gemm_2ms": 2, "xt_idle_3ms": 3}
            for name in want_ms:
                o = op(s, name)
                check(o is not None and o["count"] == 5, f"{mode}: {name} timed 5 times")
            with open(os.path.join(out, "00000-00001.trace.json")) as f:
                xs = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"][1:]  # after the warm-up
            launches = [
                (float(l.split()[1]), float(l.split()[2]))
                for l in p.stdout.splitlines()
                if l.startswith("idle_launch_us")
            ]
            check(len(xs) == 25 and len(launches) == 10, f"{mode}: 25 ops in the trace ({len(xs)}), 10 launch times")
            if len(xs) != 25 or len(launches) != 10:
                continue
            names = [e["name"] for e in xs]
            want = ["xt_first_8ms", "xt_queued_4ms", "cublasGemmEx", "xt_after_gemm_2ms", "xt_idle_3ms"] * 5
            check(names == want, f"{mode}: trace in launch order: {names[:5]}")
            # Queued: starts where the op before it ended (two placements on the host clock apart at most).
            gaps = [
                round(b["ts"] - (a["ts"] + a["dur"]), 1)
                for a, b in zip(xs, xs[1:])
                if b["name"] in ("xt_queued_4ms", "xt_after_gemm_2ms")
            ]
            check(
                all(abs(g) <= 2 * place_us + 50 for g in gaps),
                f"{mode}: queued kernels start at the previous op's end (gaps us {gaps})",
            )
            # Launched on an idle stream: starts within its launch call.
            idle = [e for e in xs if e["name"] in ("xt_first_8ms", "xt_idle_3ms")]
            late = [(round(e["ts"] - a, 1), round(b - a, 1)) for e, (a, b) in zip(idle, launches)]
            check(
                all(-place_us <= d <= call + place_us for d, call in late),
                f"{mode}: kernels on an idle stream start within their launch call "
                f"(us after the call's start, call us: {late})",
            )
            # Durations: the kernel's device time, plus, on an idle stream, what the launch call took
            # at most. A kernel timed from the wrong start (its launch when queued, the op before it
            # when idle) is off by milliseconds.
            call_us = iter(b - a for a, b in launches)
            bad = []
            for e in xs:
                if e["name"] not in want_ms:
                    continue
                us = want_ms[e["name"]] * 1e3
                slack = next(call_us) if e["name"] in ("xt_first_8ms", "xt_idle_3ms") else 0.0
                if not us - place_us <= e["dur"] <= us * 1.05 + slack + place_us:
                    bad.append((e["name"], round(e["dur"], 1), round(slack, 1)))
            check(not bad, f"{mode}: every kernel lasts its device time (+ its launch call when idle): wrong {bad}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check")
    ap.add_argument("--bin", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--simgpu", required=True)
    args = ap.parse_args()
    args.launch = os.path.join(args.bin, "xtimer_launch")
    {
        "kernels": check_kernels,
        "gemm": check_gemm,
        "nccl": check_nccl,
        "same-results": check_same_results,
        "no-cuda": check_no_cuda,
        "bad-output": check_bad_output,
        "one-event": check_one_event,
    }[args.check](args)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
