"""What the peer tests share: finding the peer environment (.peers, scripts/setup_peers.sh) or
skipping with one line, starting a launcher with a given environment, and a real etcd.

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from peers import Peers, free_port, ...
"""
import os
import shutil
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SKIP = 77  # ctest SKIP_RETURN_CODE


class Peers:
    """The peer virtual environment: its python, torchrun, dlrover-run, py-spy."""

    def __init__(self, path):
        self.path = path
        self.python = os.path.join(path, "bin", "python")
        self.torchrun = os.path.join(path, "bin", "torchrun")
        self.dlrover_run = os.path.join(path, "bin", "dlrover-run")
        self.py_spy = os.path.join(path, "bin", "py-spy")

    def missing(self):
        """What is missing, or None."""
        for exe in (self.python, self.torchrun, self.dlrover_run):
            if not os.access(exe, os.X_OK):
                return exe
        return None


def peers_or_skip(path):
    """The Peers at `path`, or exit 77 with one line saying how to install them."""
    peers = Peers(path)
    gone = peers.missing()
    if gone:
        print(f"SKIP: the peer tools are not installed ({gone} missing): run scripts/setup_peers.sh "
              f"(torch 2.x, dlrover, py-spy from PyPI; about 4 GB to download once)")
        sys.exit(SKIP)
    return peers


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(out, pypath, **extra):
    """The environment every launcher of a comparison gets: the test's own, less what a launcher
    sets for its workers, plus OUT and the build's xtimer package."""
    env = dict(os.environ)
    for k in list(env):
        if k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LD_PRELOAD", "OMP_NUM_THREADS") or \
                k.startswith(("TORCHELASTIC_", "GROUP_", "ROLE_", "LOCAL_WORLD", "XTIMER_", "DLROVER_")):
            del env[k]
    env.update(OUT=out, PYTHONPATH=pypath, XTIMER_METRICS_PORT="0", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


class Etcd:
    """A real etcd (Debian's etcd-server) on loopback, for xtimer_run's elastic rendezvous."""

    def __init__(self, tmp):
        self.port = free_port()
        peer = free_port()
        exe = shutil.which("etcd")
        if exe is None:
            sys.exit("etcd is not installed (Debian package etcd-server; scripts/setup.sh installs it)")
        self.proc = subprocess.Popen(
            [exe, "--data-dir", os.path.join(tmp, "etcd"), "--listen-client-urls", f"http://127.0.0.1:{self.port}",
             "--advertise-client-urls", f"http://127.0.0.1:{self.port}", "--listen-peer-urls",
             f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"default=http://127.0.0.1:{peer}"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "etcd.log"), "w"))
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.1)
        sys.exit("etcd did not start (see etcd.log)")

    def stop(self):
        self.proc.kill()
        self.proc.wait()


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
