"""Starting and stopping xtimer_collector from the collector's Python tests."""
import os
import re
import signal
import subprocess
import time


class Collector:
    """xtimer_collector on free loopback ports; stderr goes to WORK/collector.log."""

    def __init__(self, binary, work, *extra, env=None, http=True):
        self.log_path = os.path.join(work, "collector.log")
        self.out = os.path.join(work, "out")
        args = [binary, "--listen", "127.0.0.1:0", "--out", self.out, *extra]
        if http:
            args += ["--http", "127.0.0.1:0"]
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log, env={**os.environ, **(env or {})})
        self.grpc_port = self.http_port = None
        deadline = time.time() + 30
        while time.time() < deadline and self.grpc_port is None:
            m = re.search(
                r"listening on 127\.0\.0\.1:(\d+) \(gRPC[^)]*\)(?:, http://127\.0\.0\.1:(\d+)/)?",
                open(self.log_path).read(),
            )
            if m:
                self.grpc_port = int(m.group(1))
                self.http_port = int(m.group(2)) if m.group(2) else None
            elif self.proc.poll() is not None:
                raise RuntimeError("xtimer_collector exited: " + open(self.log_path).read())
            else:
                time.sleep(0.05)
        if self.grpc_port is None:
            raise RuntimeError("xtimer_collector did not start: " + open(self.log_path).read())

    @property
    def target(self):
        return f"127.0.0.1:{self.grpc_port}"

    def stop(self, timeout=30):
        """SIGTERM; returns the exit status (None if it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        self.log.close()
        return self.proc.returncode

    def log_text(self):
        return open(self.log_path).read()
