#!/usr/bin/env python3
"""How soon a slowdown is named after its onset, against the goal (15 s): runs the end-to-end
slowdown check (tests/slowdown/check_slowdown.py, which asserts who is named and prints each
latency, but bounds none: on a shared machine it depends on when the threads run) and prints each
cause's latency, in seconds and in the job's steps, with its ratio to the goal.

  slowdown_latency.py [--layout one-node|two-nodes|both] [--goal 15] CHECK_ARGS...
  e.g. slowdown_latency.py --bin build/bin --lib build/tests/lib/libslowdown_train.so \
      --simgpu build/lib/simgpu --healthy 20

CHECK_ARGS go to check_slowdown.py as they are (--bin, --lib, --simgpu, --python, --healthy).

Exits 0 whatever the figures (a benchmark, not a test); 1 only when the check itself failed.
"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "..", "slowdown", "check_slowdown.py")
FIGURE = re.compile(r"^figure: detection latency (\S+) (\S+): ([\d.]+) s(?:, about (\d+) steps of ([\d.]+) s)?")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layout", default="one-node", choices=["one-node", "two-nodes", "both"])
    ap.add_argument("--goal", type=float, default=15.0, help="seconds from the onset to the verdict")
    args, check_args = ap.parse_known_args()
    p = subprocess.run([sys.executable, CHECK, args.layout] + check_args, capture_output=True, text=True)
    rows = []
    for line in p.stdout.splitlines():
        m = FIGURE.match(line)
        if m:
            rows.append((m.group(1), m.group(2), float(m.group(3)), m.group(4), m.group(5)))
    print(f"{'layout':<10} {'cause':<8} {'latency':>9} {'steps':>6} {'/ goal':>7}")
    for layout, cause, latency, steps, step in rows:
        print(f"{layout:<10} {cause:<8} {latency:>7.1f} s {steps or '-':>6} {latency / args.goal:>7.2f}")
    if rows:
        worst = max(r[2] for r in rows)
        ratio = worst / args.goal
        print(f"figure: slowdown detection latency: worst {worst:.1f} s, {ratio:.2f} of the {args.goal:g} s goal")
    if p.returncode != 0 or not rows:
        print(p.stdout[-3000:] + p.stderr[-2000:])
        print(f"slowdown_latency.py: the check failed (exit {p.returncode}); the figures above are incomplete")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
