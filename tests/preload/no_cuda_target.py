#!/usr/bin/env python3
"""A Python process that never calls CUDA, for the dump signal at load: prints
"ready PID CHILD_PID", waits in waiting_room() until stdin ends, exits 0. With --fork a forked
child (as a data loader's worker is) waits the same way, and the parent exits with its status.
"""
import os
import select
import sys


def waiting_room():
    while True:
        select.select([sys.stdin], [], [])  # interrupted by a signal: retried (PEP 475)
        if not os.read(sys.stdin.fileno(), 4096):
            return


def main():
    child = 0
    if "--fork" in sys.argv:
        child = os.fork()
        if child == 0:
            waiting_room()
            os._exit(0)
    print(f"ready {os.getpid()} {child}", flush=True)
    waiting_room()
    if child:
        _, status = os.waitpid(child, 0)
        sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)


if __name__ == "__main__":
    main()
