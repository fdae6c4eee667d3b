#!/usr/bin/env python3
"""What reading the thread names costs next to reading the frames, in this interpreter.

Starts named threads parked on an Event (8, then 99: CPython's frame dumper lists 100 threads at
most), imports torch when it can (sys.modules then holds ~900 modules), and times, in this process,
CPython's frame dumper (as the capture calls it, names included) and the name read alone.

  python3 py_names_bench.py LIBRARY [--reps N]"""
import ctypes
import sys
import threading

lib_path = sys.argv[1]
reps = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 50
try:
    import torch  # noqa: F401
except ImportError:
    pass
lib = ctypes.CDLL(lib_path)
release = threading.Event()
started = 0
print(f"python {sys.version.split()[0]}, {len(sys.modules)} modules imported, {reps} reads each")
for total in (8, 99):
    while started < total:
        threading.Thread(target=release.wait, name=f"worker-{started}", daemon=True).start()
        started += 1
    frames, names, named = ctypes.c_double(), ctypes.c_double(), ctypes.c_int()
    if (
        lib.xtc_time_python_reads(
            sys.version_info.minor, reps, ctypes.byref(frames), ctypes.byref(names), ctypes.byref(named)
        )
        != 0
    ):
        sys.exit("FAIL: Python frames or thread names cannot be read here")
    print(
        f"{total + 1} threads ({named.value} named): frames and names {frames.value:.0f} us, names alone "
        f"{names.value:.0f} us: names are {100 * names.value / frames.value:.0f}% of the Python read"
    )
release.set()
