"""A real etcd (Debian's etcd-server) on loopback for the tests of etcd rendezvous.

    etcd = Etcd(tmp)     # listening on 127.0.0.1:etcd.port, log in tmp/etcd.log
    etcd.rendezvous_args("2:3", "job1", "lease_ttl=3")   # xtimer_run's flags to meet there
    etcd.stop()

    with Etcd(tmp) as etcd:  # the same, stopped however the block ends
        ...
"""
import os
import shutil
import socket
import subprocess
import sys

from checks import free_port, wait_for


class Etcd:
    def __init__(self, tmp):
        self.port = free_port()
        peer = free_port()
        exe = shutil.which("etcd")
        if exe is None:
            sys.exit("etcd is not installed (Debian package etcd-server; scripts/setup.sh installs it)")
        self.proc = subprocess.Popen(
            [
                exe,
                "--data-dir",
                os.path.join(tmp, "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{self.port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{self.port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(tmp, "etcd.log"), "w"),
        )
        ok = wait_for(lambda: self._up(), 20, 0.1)
        if not ok:
            sys.exit("etcd did not start (see etcd.log)")

    def _up(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def rendezvous_args(self, nnodes, rid, conf=None):
        """xtimer_run's arguments for an etcd rendezvous here, from this host's loopback;
        `conf`: its --rdzv-conf, if any."""
        args = ["--nnodes", nnodes, "--rdzv-backend", "etcd", "--rdzv-endpoint", f"127.0.0.1:{self.port}"]
        args += ["--rdzv-id", rid, "--local-addr", "127.0.0.1"]
        return args + (["--rdzv-conf", conf] if conf else [])

    def stop(self):
        self.proc.kill()
        self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
