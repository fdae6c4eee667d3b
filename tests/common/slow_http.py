"""Slow HTTP clients for the servers' tests: connections that send a request header one line a
second (slowloris), which once held the agent's and the collector's HTTP servers."""
import socket
import threading
import time
import urllib.request


class SlowClients:
    """`count` connections to 127.0.0.1:port, each sending one header line per `interval` seconds
    for up to `duration` seconds (never finishing the header). stop() closes them all."""

    def __init__(self, port, count, path="/metrics", interval=1.0, duration=60.0):
        self.socks = []
        self.connected = 0
        self._stop = threading.Event()
        for _ in range(count):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n".encode())
            self.socks.append(s)
            self.connected += 1
        self._thread = threading.Thread(target=self._drip, args=(interval, duration), daemon=True)
        self._thread.start()

    def _drip(self, interval, duration):
        end = time.monotonic() + duration
        n = 0
        while not self._stop.is_set() and time.monotonic() < end:
            for s in self.socks:
                try:
                    s.sendall(f"X-Slow-{n}: {'a' * 10}\r\n".encode())
                except OSError:
                    pass  # the server gave up on it: what we want
            n += 1
            self._stop.wait(interval)

    def closed_by_server(self):
        """How many of the connections the server has closed (EOF or reset when read)."""
        closed = 0
        for s in self.socks:
            s.setblocking(False)
            try:
                data = s.recv(65536)
                closed += 1 if data == b"" or b"HTTP/1.1 4" in data else 0
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
            s.setblocking(True)
        return closed

    def stop(self):
        self._stop.set()
        self._thread.join()
        for s in self.socks:
            s.close()


def timed_get(url, timeout=30):
    """(status or None, seconds) of one GET."""
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            r.read()
            return r.status, time.monotonic() - t0
    except OSError:
        return None, time.monotonic() - t0
