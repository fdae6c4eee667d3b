#!/usr/bin/env python3
"""The dump signal in processes that never call CUDA, under xtimer_launch.

Before the library installed its handler at load, SIGUSR2 killed such a process.

  check_early_dump.py CHECK --bin BUILD/bin --program no_cuda_program
  CHECK: python-three | c-program | c-busy | own-handler | ignored | fork | launcher-rank | spawn
"""
import argparse
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import check, failures, load_json, wait_for  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"
STACK = "00000-00001.stacktrace"  # no RANK: rank 0 of 1


class Target:
    """A command under xtimer_launch that prints "ready PID ..." and runs until its stdin ends."""

    def __init__(self, args, out, cmd, extra_env=None):
        env = dict(os.environ, XTIMER_TIMELINE_PATH=out, XTIMER_METRICS_PORT="0")
        for k in ("LD_PRELOAD", "XTIMER_AGENT_SOCKET", "RANK", "WORLD_SIZE", "LOCAL_RANK", "XTIMER_DISABLE"):
            env.pop(k, None)
        env.update(extra_env or {})
        self.proc = subprocess.Popen(
            [os.path.join(args.bin, "xtimer_launch")] + cmd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        line = self.proc.stdout.readline().split()
        check(len(line) >= 2 and line[0] == "ready", f"{os.path.basename(cmd[-1])} started: {line}")
        self.pid = int(line[1]) if len(line) >= 2 else -1
        self.child = int(line[2]) if len(line) >= 3 else 0

    def finish(self, timeout=30):
        """Closes stdin; the exit status, stdout and stderr."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            out, err = self.proc.communicate()
        return self.proc.returncode, out, err


def wait_dump(out, timeout=30, name=STACK):
    """The stack file once written and symbolised (xtimer_symbolize rewrites it), or None."""
    path = os.path.join(out, name)
    return wait_for(lambda: (lambda d: d if d and d.get("symbolized") else None)(load_json(path)), timeout)


def functions(dump, kind):
    return [f.get("function", "") for t in dump.get("threads", []) for f in t.get(kind, [])]


def check_dump(dump, pid, native_fn=None, python_fn=None):
    check(dump is not None, "a stack file was written and symbolised")
    if dump is None:
        return
    check(
        dump.get("reason") == "signal" and dump.get("pid") == pid,
        f"reason signal, pid {pid}: " f"{dump.get('reason')}, {dump.get('pid')}",
    )
    check(not dump.get("inflight_ops"), f"no GPU part (no op in flight): {dump.get('inflight_ops')}")
    check(any(t.get("captured") for t in dump.get("threads", [])), "native frames were captured")
    if native_fn:
        check(
            any(f.split(".")[0] == native_fn for f in functions(dump, "native")),
            f"{native_fn} among the native frames: {functions(dump, 'native')}",
        )
    if python_fn:
        check(
            python_fn in functions(dump, "python"), f"{python_fn} among the Python frames: {functions(dump, 'python')}"
        )


def check_python_three(args, out):
    t = Target(args, out, [PYTHON, os.path.join(HERE, "no_cuda_target.py")])
    for i in range(3):
        os.kill(t.pid, signal.SIGUSR2)
        dump = wait_dump(out)
        check_dump(dump, t.pid, python_fn="waiting_room")
        if dump:
            os.rename(os.path.join(out, STACK), os.path.join(out, f"dump{i}.json"))
    rc, _, err = t.finish()
    check(rc == 0, f"the Python process finished normally after three dump signals (exit {rc}) {err[-300:]}")
    check(len(glob.glob(os.path.join(out, "dump*.json"))) == 3, "three stack files")


def check_c_program(args, out):
    t = Target(args, out, [args.program, "wait"])
    os.kill(t.pid, signal.SIGUSR2)
    dump = wait_dump(out)
    check_dump(dump, t.pid, native_fn="wait_for_input")
    if dump:
        check(not functions(dump, "python"), "no Python frames in a C program")
    rc, _, err = t.finish()
    check(rc == 0, f"the C program exits 0 after the dump signal (exit {rc}) {err[-300:]}")


def check_c_busy(args, out):
    stop = os.path.join(out, "stop")
    t = Target(args, out, [args.program, "busy", stop])
    time.sleep(0.2)
    os.kill(t.pid, signal.SIGUSR2)
    dump = wait_dump(out)
    check_dump(dump, t.pid, native_fn="busy_loop")
    open(stop, "w").close()
    rc, _, err = t.finish()
    check(rc == 0, f"the busy C program exits 0 after the dump signal (exit {rc}) {err[-300:]}")


def check_own_handler(args, out):
    t = Target(args, out, [args.program, "own-handler"])
    for _ in range(3):
        os.kill(t.pid, signal.SIGUSR2)
        time.sleep(0.2)
    rc, stdout, err = t.finish()
    check(
        rc == 0 and "handled 3" in stdout,
        f"the program's own SIGUSR2 handler got all three ({stdout.strip()!r}, " f"exit {rc}) {err[-300:]}",
    )
    check(not os.path.exists(os.path.join(out, STACK)), "no stack file: the program keeps its signal")


def check_ignored(args, out):
    # The shell (preloaded too) ignores the signal, then runs the program, which inherits that.
    t = Target(args, out, ["sh", "-c", "trap '' USR2; exec \"$@\"", "sh", args.program, "wait"])
    os.kill(t.pid, signal.SIGUSR2)
    time.sleep(0.5)
    rc, _, err = t.finish()
    check(rc == 0, f"a signal the program inherited as ignored stays ignored (exit {rc}) {err[-300:]}")
    check(not os.path.exists(os.path.join(out, STACK)), "no stack file")


def check_fork(args, out):
    t = Target(args, out, [PYTHON, os.path.join(HERE, "no_cuda_target.py"), "--fork"])
    check(t.child > 0, "a forked child waits beside the parent")
    if t.child > 0:
        os.kill(t.child, signal.SIGUSR2)
        time.sleep(1)
        check(
            not os.path.exists(os.path.join(out, STACK)),
            "the forked child writes no stack file (it would be its " "parent's)",
        )
    os.kill(t.pid, signal.SIGUSR2)
    check_dump(wait_dump(out), t.pid, python_fn="waiting_room")
    rc, _, err = t.finish()
    check(rc == 0, f"parent and forked child both finish normally (exit {rc}) {err[-300:]}")


def check_launcher_rank(args, out):
    """A launcher with a RANK of its own (torchrun in a Kubernetes PyTorchJob has the node's RANK
    and WORLD_SIZE, no LOCAL_RANK) starts a worker whose global RANK happens to be the same: the
    worker is a rank, not the launcher's helper, and dumps."""
    t = Target(
        args,
        out,
        [
            "sh",
            "-c",
            'RANK=0 LOCAL_RANK=0 WORLD_SIZE=4 "$@"; exit $?',
            "sh",
            PYTHON,
            os.path.join(HERE, "no_cuda_target.py"),
        ],
        {"RANK": "0", "WORLD_SIZE": "2"},
    )
    os.kill(t.pid, signal.SIGUSR2)
    check_dump(wait_dump(out, name="00000-00004.stacktrace"), t.pid, python_fn="waiting_room")
    rc, _, err = t.finish()
    check(rc == 0, f"launcher and worker finish normally (exit {rc}) {err[-300:]}")


def check_spawn(args, out):
    """A process a rank starts with the rank's own environment (a "spawn" data-loader worker)
    survives the dump signal and writes no file: it would be the rank's."""
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "4"}
    t = Target(args, out, ["sh", "-c", '"$@"; exit $?', "sh", PYTHON, os.path.join(HERE, "no_cuda_target.py")], env)
    os.kill(t.pid, signal.SIGUSR2)
    time.sleep(1)
    check(not os.path.exists(os.path.join(out, "00000-00004.stacktrace")), "the rank's helper writes no stack file")
    rc, _, err = t.finish()
    check(rc == 0, f"the helper survives the dump signal and finishes normally (exit {rc}) {err[-300:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check")
    ap.add_argument("--bin", required=True)
    ap.add_argument("--program", required=True)
    args = ap.parse_args()
    out = tempfile.mkdtemp(prefix="xtimer-early-dump-")
    {
        "python-three": check_python_three,
        "c-program": check_c_program,
        "c-busy": check_c_busy,
        "own-handler": check_own_handler,
        "ignored": check_ignored,
        "fork": check_fork,
        "launcher-rank": check_launcher_rank,
        "spawn": check_spawn,
    }[args.check](args, out)
    if failures:
        print(f"{len(failures)} check(s) failed; files kept in {out}")
        sys.exit(1)
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
