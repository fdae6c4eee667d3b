#!/usr/bin/env python3
"""Early stop, measured: the slownode8 scenarios of netns_scenarios.py (8 unshaped nodes, node 6
black-holed, node 3's uplink at 40 Mbit/s or 8 Mbit/s, 64M per test) at --timeout 15 and 30, each
with early stop and with --no-early-stop, in the same session. Prints each probe time, the
verdicts of nodes 3 and 6, and the ratio without/with. Root and network namespaces; not a test
(no time is asserted), a benchmark:

  python3 tests/netprobe/bench_early_stop.py --bin build/bin/xtimer_netprobe [--rates 40mbit,8mbit]
"""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_scenarios as ns  # noqa: E402


def once(args, rate, timeout, early, outdir):
    os.makedirs(outdir, exist_ok=True)
    try:
        report, codes, wall = ns.slow_node(args, outdir, rate, timeout, [] if early else ["--no-early-stop"])
    finally:
        ns.cleanup()
    status = {n["rank"]: n["status"] for n in report["nodes"]}
    return report["probe_time_s"], status.get(3), status.get(6)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--rates", default="40mbit,8mbit")
    ap.add_argument("--timeouts", default="15,30")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    why = ns.namespaces_available()
    if why is not None:
        print(f"SKIPPED: {why}")
        return ns.SKIP
    ns.remove_stale()
    out = args.out or tempfile.mkdtemp(prefix="xtimer-early-stop-")
    head = f"{'uplink of node 3':>16} {'--timeout':>9} {'early stop':>11} {'no early stop':>14} {'ratio':>6}"
    print(head + "  verdicts (3, 6)")
    for rate in args.rates.split(","):
        for timeout in args.timeouts.split(","):
            on = once(args, rate, timeout, True, os.path.join(out, f"{rate}-{timeout}-on"))
            off = once(args, rate, timeout, False, os.path.join(out, f"{rate}-{timeout}-off"))
            print(
                f"{rate:>16} {timeout:>9} {on[0]:>10.2f}s {off[0]:>13.2f}s {off[0] / on[0]:>5.2f}x  "
                f"with: {on[1]}, {on[2]}; without: {off[1]}, {off[2]}",
                flush=True,
            )
    print(f"(logs and reports in {out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
