#!/usr/bin/env python3
"""Writes one rank's stack file with many distinct threads (one 90 MB file with
50,000 distinct threads once peaked at 1.46 GB in the viewer). Every thread has its own stack: its
frames' names carry the thread's number below a few shared outer frames.

usage: many_threads.py DIR [--threads 50000] [--native 8] [--python 3] [--world 2]
Writes DIR/00000-<world>.stacktrace (rank 0) and prints its size.
"""
import argparse
import json
import os

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("--threads", type=int, default=50000)
ap.add_argument("--native", type=int, default=8)
ap.add_argument("--python", type=int, default=3)
ap.add_argument("--world", type=int, default=2)
ap.add_argument(
    "--unsymbolized",
    action="store_true",
    help="native frames as written by a rank (module + offset only): many small frames",
)
a = ap.parse_args()
os.makedirs(a.dir, exist_ok=True)
path = os.path.join(a.dir, f"00000-{a.world:05d}.stacktrace")
shared_native = ["_start", "__libc_start_main", "main", "start_thread"]
shared_python = ["<module>", "run"]
with open(path, "w") as f:
    head = {
        "format": "xtimer-stacktrace",
        "version": 1,
        "rank": 0,
        "world_size": a.world,
        "local_rank": 0,
        "host": "node-a",
        "pid": 4242,
        "reason": "request",
        "time": "2026-11-22T10:15:30.123Z",
        "symbolized": not a.unsymbolized,
        "process_state": {"code": "S", "name": "sleeping"},
        "inflight_ops": [],
    }
    f.write(json.dumps(head)[:-1] + ', "threads": [\n')
    for t in range(a.threads):
        native = []
        for d in range(a.native):
            if a.unsymbolized:  # distinct offsets below the shared outer frames
                off = 0x1000 + 16 * d if d < len(shared_native) else 0x100000 + 64 * (t * a.native + d)
                native.append({"module": "/usr/lib/libw.so", "offset": hex(off)})
                continue
            name = shared_native[d] if d < len(shared_native) else f"worker_loop_{t}_level_{d}(int, std::string const&)"
            native.append(
                {
                    "module": "/usr/lib/x86_64-linux-gnu/libworker_threads.so.1",
                    "offset": hex(0x1000 + 16 * d),
                    "function": name,
                    "file": f"src/worker/level_{d}.cc",
                    "line": 10 + d,
                    "inlined": False,
                }
            )
        python = []
        for d in range(a.python):
            name = shared_python[d] if d < len(shared_python) else f"task_{t}_step_{d}"
            python.append({"function": name, "file": f"/app/tasks/t{d}.py", "line": 20 + d})
        thread = {
            "tid": 5000 + t,
            "name": f"worker-{t}",
            "main": t == 0,
            "holds_gil": t == 0,
            "state": "S",
            "captured": True,
            "native": native,
            "python": python,
        }
        f.write(("," if t else "") + json.dumps(thread) + "\n")
    f.write("]}\n")
print(f"{path}: {os.path.getsize(path) / 1e6:.1f} MB, {a.threads} threads")
