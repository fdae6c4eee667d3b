#!/usr/bin/env python3
"""A stand-in for `torchrun --nproc-per-node N` on one simulated node: starts N rank processes
with RANK, WORLD_SIZE and LOCAL_RANK set (and SIMGPU_NODE with --simgpu-node), waits for them, and
exits with the first non-zero exit status (like torchrun without restarts). A terminated launcher
terminates its ranks, as torchrun does.

  node_ranks.py --nproc 4 --node-rank 1 --world 8 [--python PY] [--simgpu-node] -- SCRIPT ARGS...

Each rank runs `PY SCRIPT ARGS...` with {rank}, {world}, {nproc} and {local} in ARGS replaced by
its own values.

As a module, `agent_command` and `agent_env` build what the tests' agents (xtimer_launch, one
per simulated node) run this under, and `Agents` holds the agents' processes:

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
    from node_ranks import Agents, agent_command, agent_env
"""
import argparse
import os
import signal
import subprocess
import sys

# What a rank or an agent must not inherit from the test's own environment.
INHERITED = ("LD_PRELOAD", "XTIMER_AGENT_SOCKET", "RANK", "WORLD_SIZE", "LOCAL_RANK")


def agent_env(drop=(), **values):
    """os.environ with `values` set and the inherited rank and agent variables (and `drop`)
    removed."""
    env = dict(os.environ, **values)
    for k in INHERITED + tuple(drop):
        env.pop(k, None)
    return env


def agent_command(bin_dir, nproc, node_rank, world, rank_argv, python=None, simgpu_node=False):
    """xtimer_launch running this script for one node's `nproc` ranks; `rank_argv` is SCRIPT
    ARGS... (with the placeholders above)."""
    cmd = [
        os.path.join(bin_dir, "xtimer_launch"),
        sys.executable,
        os.path.abspath(__file__),
        "--nproc",
        str(nproc),
        "--node-rank",
        str(node_rank),
        "--world",
        str(world),
    ]
    if python is not None:
        cmd += ["--python", python]
    if simgpu_node:
        cmd.append("--simgpu-node")
    return cmd + ["--"] + list(rank_argv)


def fill(arg, fields):
    """`arg` with each placeholder replaced (other braces, as in JSON, stay as they are)."""
    for k, v in fields.items():
        arg = arg.replace(k, str(v))
    return arg


class Agents:
    """The agents of a test's job, each in a session of its own (killing one kills its ranks)."""

    def __init__(self):
        self.procs = []

    def spawn(self, cmd, env, log_path):
        log = open(log_path, "w")
        self.procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def wait(self, timeout):
        return [p.wait(timeout=timeout) for p in self.procs]

    def kill(self):
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, required=True)
    ap.add_argument("--node-rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--simgpu-node", action="store_true", help="set SIMGPU_NODE to the node rank")
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    argv = [a for a in args.argv if a != "--"]
    if not argv:
        sys.exit("node_ranks.py: no rank script after --; give SCRIPT ARGS...")
    procs = []
    for local in range(args.nproc):
        rank = args.node_rank * args.nproc + local
        fields = {"{rank}": rank, "{world}": args.world, "{nproc}": args.nproc, "{local}": local}
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.world), LOCAL_RANK=str(local))
        if args.simgpu_node:
            env["SIMGPU_NODE"] = str(args.node_rank)
        procs.append(subprocess.Popen([args.python] + [fill(a, fields) for a in argv], env=env))
    signal.signal(signal.SIGTERM, lambda *_: [p.terminate() for p in procs])
    codes = [p.wait() for p in procs]
    bad = [c for c in codes if c != 0]
    sys.exit(bad[0] if bad else 0)


if __name__ == "__main__":
    main()
