#!/usr/bin/env python3
"""Checks that programs linked against the real CUDA toolkit load the simulated libraries.

usage: check_linkage.py SIMDIR PROGRAM [PROGRAM...]

- each simulated library defines the version node of its real counterpart (or none);
- under LD_LIBRARY_PATH=SIMDIR every CUDA/NCCL library a program needs resolves into SIMDIR
  (the program's RUNPATH to /usr/local/cuda must not win);
- every CUDA/cuBLAS/NCCL symbol the programs import is defined by the simulation;
- the first program runs with exit status 0 and no "no version information" warning;
- libcupti.so.12 forwards to libcupti.so.13: the same version through either.
"""
import ctypes
import os
import re
import subprocess
import sys

VERSIONED = {
    "libcudart.so.13": "libcudart.so.13",
    "libcublas.so.13": "libcublas.so.13",
    "libcublasLt.so.13": "libcublasLt.so.13",
    "libcuda.so.1": None,
    "libnccl.so.2": None,
    "libcupti.so.13": "libcupti.so.13",
    "libcupti.so.12": "libcupti.so.12",  # CUDA 12 clients, forwarded to libcupti.so.13
}
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def run(*cmd, env=None):
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def version_defs(lib):
    out = run("readelf", "-V", "-W", lib).stdout
    section = out.split("Version definition section")[1] if "Version definition section" in out else ""
    section = section.split("Version needs section")[0]
    return set(re.findall(r"Name: (\S+)", section))


def defined_symbols(lib):
    out = run("nm", "-D", "--defined-only", lib).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def main():
    simdir, programs = sys.argv[1], sys.argv[2:]
    env = dict(os.environ, LD_LIBRARY_PATH=simdir)
    defined = set()
    for lib, node in VERSIONED.items():
        path = os.path.join(simdir, lib)
        if not os.path.exists(path):
            fail(f"{path} missing")
            continue
        defs = version_defs(path)
        if node and node not in defs:
            fail(f"{lib} lacks version node {node} (has {sorted(defs)})")
        if not node and defs:
            fail(f"{lib} should be unversioned like the real one, defines {sorted(defs)}")
        defined |= defined_symbols(path)
    for prog in programs:
        ldd = run("ldd", prog, env=env).stdout
        for lib in VERSIONED:
            m = re.search(rf"^\s*{re.escape(lib)} => (\S+)", ldd, re.M)
            if m and not os.path.realpath(m.group(1)).startswith(os.path.realpath(simdir)):
                fail(f"{prog}: {lib} resolves to {m.group(1)}, not into {simdir}")
        undefined = run("nm", "-D", "--undefined-only", prog).stdout
        for line in undefined.splitlines():
            sym = line.split()[-1].split("@")[0]
            if re.match(r"^(cu|cuda|cublas|nccl)[A-Z_]", sym) and sym not in defined:
                fail(f"{prog} imports {sym}, which the simulation does not define")
    versions = []
    for lib in ("libcupti.so.12", "libcupti.so.13"):
        v = ctypes.c_uint32(0)
        rc = ctypes.CDLL(os.path.join(simdir, lib)).cuptiGetVersion(ctypes.byref(v))
        versions.append((rc, v.value))
    if versions[0] != versions[1] or versions[0][0] != 0:
        fail(f"libcupti.so.12 does not forward to libcupti.so.13: cuptiGetVersion (rc, version) {versions}")
    proc = run(programs[0], env=env)
    if proc.returncode != 0:
        fail(f"{programs[0]} exited with {proc.returncode}: {proc.stderr.strip()}")
    if "no version information" in proc.stderr or "check_match" in proc.stderr:
        fail(f"{programs[0]} loader complaint: {proc.stderr.strip()}")
    print(proc.stdout.strip())
    print("linkage OK" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
