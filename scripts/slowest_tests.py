#!/usr/bin/env python3
"""Prints the slowest tests of a ctest run, from its log (Testing/Temporary/LastTest.log).

  scripts/slowest_tests.py LOG [N]
"""
import re
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: slowest_tests.py LOG [N]")
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    try:
        text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
    except OSError as e:
        sys.exit(f"slowest_tests.py: cannot read {sys.argv[1]}: {e.strerror}")
    # Each test's block starts with "<n>/<m> Test: NAME" and carries "Test time =   1.23 sec".
    times = []
    name = None
    for line in text.splitlines():
        m = re.match(r"\d+/\d+ Test: (.+)$", line)
        if m:
            name = m.group(1).strip()
            continue
        m = re.match(r'"?Test time"?\s*=\s*([\d.]+) sec', line.strip())
        if m and name:
            times.append((float(m.group(1)), name))
            name = None
    for seconds, test in sorted(times, reverse=True)[:count]:
        print(f"  {seconds:8.1f} s  {test}")


if __name__ == "__main__":
    main()
