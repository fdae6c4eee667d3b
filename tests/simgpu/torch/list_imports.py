#!/usr/bin/env python3
"""Lists every CUDA-library symbol an installed PyTorch imports: imports.txt beside this file.

    tests/simgpu/torch/list_imports.py SITE_PACKAGES > tests/simgpu/torch/imports.txt

SITE_PACKAGES holds `torch/` and the `nvidia/` wheels it was installed with (pip install
torch==X). For each library of `torch/lib` and torch's extension module, the undefined dynamic
symbols (`nm -D --undefined-only`) are assigned to the CUDA library that defines them: one of
the wheels' libraries among its DT_NEEDED, or the driver (`libcuda.so.1`, never in a wheel) for
`cu*` names that none defines. One line per symbol: `soname symbol version` (`-` when the
reference carries no version). gen_gaps.py builds the simulation's missing pieces from it.
"""
import glob
import os
import subprocess
import sys


def nm(path, undefined):
    flag = "--undefined-only" if undefined else "--defined-only"
    out = subprocess.run(["nm", "-D", flag, path], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if not parts:
            continue
        name = parts[-1]
        sym, _, version = name.partition("@")
        yield sym, version.lstrip("@") or "-"


def needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return [line.split("[")[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: list_imports.py SITE_PACKAGES (the folder holding torch/ and nvidia/)")
    site = sys.argv[1]
    torch_libs = sorted(glob.glob(os.path.join(site, "torch", "lib", "*.so"))) + sorted(
        glob.glob(os.path.join(site, "torch", "_C*.so"))
    )
    if not torch_libs:
        sys.exit(f"list_imports: no torch/lib/*.so under {site}: give the site-packages of a torch install")
    wheel_libs = {}
    for path in glob.glob(os.path.join(site, "nvidia", "**", "lib", "*.so*"), recursive=True):
        wheel_libs.setdefault(os.path.basename(path), path)
    defined = {}
    rows = set()
    for lib in torch_libs:
        cuda_needed = [n for n in needed(lib) if n in wheel_libs or n == "libcuda.so.1"]
        for soname in cuda_needed:
            if soname not in defined and soname in wheel_libs:
                defined[soname] = {s for s, _ in nm(wheel_libs[soname], undefined=False)}
        for sym, version in nm(lib, undefined=True):
            owner = next((n for n in cuda_needed if sym in defined.get(n, ())), None)
            if owner is None and version != "-" and version in wheel_libs:
                owner = version
            if owner is None and "libcuda.so.1" in cuda_needed and sym.startswith("cu"):
                owner = "libcuda.so.1"
            if owner is not None:
                rows.add((owner, sym, version))
    for row in sorted(rows):
        print(" ".join(row))


if __name__ == "__main__":
    main()
