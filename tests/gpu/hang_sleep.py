#!/usr/bin/env python3
"""One rank whose kernel runs past the hang timeout (torch.cuda._sleep spins on the GPU).

Run under xtimer_launch with XTIMER_HANG_TIMEOUT=2 by hang_check.py. Prints the launch time
(CLOCK_MONOTONIC seconds) of the long kernel, then waits for it.
"""
import json
import time

import torch


def launch_long_kernel(cycles):
    torch.cuda._sleep(cycles)  # this line must appear in the stack file


def main():
    torch.cuda.init()
    x = torch.ones(1024, device="cuda")
    torch.cuda.synchronize()
    # ~2e9 cycles at ~1.9 GHz: about 1 s per 2e9; 12e9 is ~6 s, past a 2 s timeout.
    print(json.dumps({"launched_at": time.monotonic()}), flush=True)
    launch_long_kernel(int(12e9))
    torch.cuda.synchronize()
    print(json.dumps({"finished_at": time.monotonic(), "x": float(x.sum())}), flush=True)


if __name__ == "__main__":
    main()
