"""What the peer tests share: finding the peer environment (.peers, scripts/setup_peers.sh; .dlrover
for the comparisons with DLRover) or skipping with one line, the environment every launcher of a
comparison gets, running one launcher; a real etcd and a free port come from tests/common/.

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from peers import Peers, free_port, ...
"""
import contextlib
import glob
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "launcher"))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from checks import free_port  # noqa: E402,F401
from local_etcd import Etcd  # noqa: E402,F401  (a real etcd on loopback)

SKIP = 77  # ctest SKIP_RETURN_CODE


class Peers:
    """A peer virtual environment (.peers, or .dlrover for DLRover): its python, torchrun,
    dlrover-run, py-spy."""

    def __init__(self, path):
        self.path = path
        self.python = os.path.join(path, "bin", "python")
        self.torchrun = os.path.join(path, "bin", "torchrun")
        self.dlrover_run = os.path.join(path, "bin", "dlrover-run")
        self.py_spy = os.path.join(path, "bin", "py-spy")

    def missing(self, dlrover):
        """What is missing, or None (dlrover-run only where `dlrover`: .dlrover has it)."""
        for exe in (self.python, self.torchrun) + ((self.dlrover_run,) if dlrover else ()):
            if not os.access(exe, os.X_OK):
                return exe
        return None


def rows(path):
    """The JSON lines of a file the workers append to ([] while it does not exist)."""
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except OSError:
        return []


def peers_or_skip(path):
    """The Peers at `path` (.peers: torch 2.15 with torchrun, DCP, py-spy, DeepSpeed, transformers,
    megatron-core; it runs on the CPU and on the simulated GPUs), or exit 77 with one line saying
    how to install them."""
    peers = Peers(path)
    gone = peers.missing(dlrover=False)
    if gone:
        print(
            f"SKIP: the peer tools are not installed ({gone} missing): run scripts/setup_peers.sh "
            f"(torch 2.15 and the frameworks from PyPI; about 5 GB to download once)"
        )
        sys.exit(SKIP)
    return peers


def dlrover_or_skip(path):
    """The DLRover environment at `path` (.dlrover: dlrover-run and its flash checkpoint with torch
    2.8, torchrun of that torch), or exit 77 with one line saying how to install it."""
    peers = Peers(path)
    gone = peers.missing(dlrover=True)
    if gone:
        print(
            f"SKIP: DLRover is not installed ({gone} missing): run scripts/setup_peers.sh --for dlrover "
            f"(dlrover 0.6.1 with torch 2.8 from PyPI; about 4 GB to download once)"
        )
        sys.exit(SKIP)
    return peers


def base_env(out, pypath, **extra):
    """The environment every launcher of a comparison gets: the test's own, less what a launcher
    sets for its workers, plus OUT and the build's xtimer package."""
    env = dict(os.environ)
    for k in list(env):
        if k in (
            "RANK",
            "LOCAL_RANK",
            "WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
            "LD_PRELOAD",
            "OMP_NUM_THREADS",
        ) or k.startswith(("TORCHELASTIC_", "GROUP_", "ROLE_", "LOCAL_WORLD", "XTIMER_", "DLROVER_")):
            del env[k]
    env.update(OUT=out, PYTHONPATH=pypath, XTIMER_METRICS_PORT="0", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def run(cmd, env, out, name, timeout):
    """Runs one launcher to its end; (exit status or None on timeout, stdout, stderr). Its
    output also goes to OUT/<name>.out and .err."""
    with open(os.path.join(out, f"{name}.out"), "w") as o, open(os.path.join(out, f"{name}.err"), "w") as e:
        p = subprocess.Popen(cmd, env=env, stdout=o, stderr=e, start_new_session=True)
        try:
            rc = p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            p.wait()
            rc = None
    return rc, open(os.path.join(out, f"{name}.out")).read(), open(os.path.join(out, f"{name}.err")).read()


def run_two_ranks(python, code, env, what=""):
    """Runs `code` (`python -c`) as ranks 0 and 1 of one job on this host, without a launcher
    (RANK, LOCAL_RANK 0, WORLD_SIZE 2, MASTER_ADDR/PORT added to `env`); (exit statuses, logs).
    Prints both ranks' last lines when one fails."""
    env = dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2")
    procs = [
        subprocess.Popen(
            [python, "-c", code],
            env=dict(env, RANK=str(r), LOCAL_RANK="0"),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    rcs = [p.returncode for p in procs]
    if any(rcs):
        print(f"--- {what}rank 0:\n{logs[0][-3000:]}\n--- {what}rank 1:\n{logs[1][-3000:]}")
    return rcs, logs


@contextlib.contextmanager
def dlrover_buffers_removed():
    """dlrover-run's agent leaves its shared-memory buffer (/dev/shm/<job>_ckpt_shm_<rank>, as
    large as the state) behind when it exits: the ones made inside the block are removed at its
    end, so that runs do not fill /dev/shm."""
    before = set(glob.glob("/dev/shm/*_ckpt_shm_*"))
    try:
        yield
    finally:
        for leftover in set(glob.glob("/dev/shm/*_ckpt_shm_*")) - before:
            try:
                os.unlink(leftover)
            except FileNotFoundError:
                pass
