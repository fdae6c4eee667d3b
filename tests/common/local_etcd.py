"""A real etcd (Debian's etcd-server) on loopback for the tests of etcd rendezvous.

    etcd = Etcd(tmp)     # listening on 127.0.0.1:etcd.port, log in tmp/etcd.log
    etcd.stop()
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

    def stop(self):
        self.proc.kill()
        self.proc.wait()
