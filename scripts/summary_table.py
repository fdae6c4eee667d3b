#!/usr/bin/env python3
"""Prints a short table of what xtimer measured, from the summary files in a folder
(matmuls with their m x n x k shape, collectives with their size).

  scripts/summary_table.py DIR [--top N]
"""
import glob
import json
import os
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: summary_table.py DIR [--top N]")
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 6
    files = sorted(glob.glob(os.path.join(sys.argv[1], "*.summary.json")))
    if not files:
        sys.exit(f"no *.summary.json in {sys.argv[1]}")
    print(f"{'rank':>4}  {'op':<34} {'kind':<10} {'count':>6} {'p50 ms':>8} {'p99 ms':>8}  rate")
    for path in files:
        try:
            with open(path) as f:
                s = json.load(f)
        except (OSError, ValueError) as e:
            print(f"skipping {path}: {e}")
            continue
        for o in s["ops"][:top]:
            rate = ""
            if "tflops" in o:
                rate = f"{o['tflops']:.1f} TFLOPS"
            elif "busbw_gbps" in o:
                rate = f"busbw {o['busbw_gbps']:.2f} GB/s"
            elif "gbps" in o:
                rate = f"{o['gbps']:.2f} GB/s"
            name = o["name"]
            if o["kind"] == "matmul":
                name += f" {o['m']}x{o['n']}x{o['k']}"
            elif o["kind"] in ("collective", "p2p"):
                name += f" {o['bytes'] / 2**20:g} MiB"
            name = name if len(name) <= 34 else name[:31] + "..."

            print(
                f"{s['rank']:>4}  {name:<34} {o['kind']:<10} {o['count']:>6} {o['p50_us'] / 1e3:>8.3f} "
                f"{o['p99_us'] / 1e3:>8.3f}  {rate}"
            )


if __name__ == "__main__":
    main()
