#!/usr/bin/env python3
"""libxtimer_preload.so exports exactly the names listed in preload/exports.map: its CUDA, cuBLAS
and NCCL hooks and the Python hook module's two entry points (xtimer_python_*), nothing else (a
leaked helper or libc name would interpose on the program's own symbols), and every listed hook really is exported.

  check_exports.py LIBRARY EXPORTS_MAP
"""
import re
import subprocess
import sys


def listed(map_path):
    with open(map_path) as f:
        text = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
    body = text.split("global:")[1].split("local:")[0]
    names = [n.strip() for n in body.split(";") if n.strip()]
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)]
    if bad:
        sys.exit(f"FAIL {map_path}: entries must be plain names, not patterns: {bad}")
    return set(names)


def main():
    lib, map_path = sys.argv[1:3]
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}
    want = listed(map_path)
    extra, missing = sorted(exported - want), sorted(want - exported)
    not_hooks = sorted(n for n in exported | want if not n.startswith(("cu", "nccl", "xtimer_python_")))
    print(f"{len(exported)} exported, {len(want)} listed")
    if not_hooks:
        print(f"FAIL not a CUDA/cuBLAS/NCCL hook, must not be exported: {not_hooks}")
    if extra:
        print(f"FAIL exported but not listed in {map_path}: {extra}")
    if missing:
        print(f"FAIL listed in {map_path} but not defined by the library: {missing}")
    sys.exit(1 if extra or missing or not_hooks else 0)


if __name__ == "__main__":
    main()
