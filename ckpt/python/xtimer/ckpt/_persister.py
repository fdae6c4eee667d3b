"""Persister processes: one per rank, started by a checkpointer, that write the rank's
shared-memory snapshot to disk behind the job, so that the training process neither writes nor
holds the interpreter lock for it.

Training side: `Persister(module, args, rank)` starts `python -m <module> '<json args>'` and a
thread reading its answers; `request(step, extra)` asks for a step ("persist N STEP [JSON]" on
its stdin, N counting the requests: a step may be saved twice), `taken()` / `wait_taken()` say
whether it has copied the newest request's snapshot out of shared memory (until then that slot
must not be overwritten), `wait_done(timeout)` waits for the write. Closing its stdin
(`close()`, or the training process's exit, a crash included) lets it finish what it was asked
and exit.

Persister side: `serve(persist)` runs the loop: one thread, the training process's priority (at
nice 10 it got a tenth of a core beside the loop and took 3-4 s for what costs it 0.3 s of CPU,
docs/benchmarks.md), torch.save without CRC32 (torch.load does not check it), and for every
request `persist(step, extra, copied)`, which calls `copied()` once the snapshot is out of
shared memory (the answer "copied N"); `serve` answers "done N" or "failed N why".
"""
import json
import logging
import os
import subprocess
import sys
import threading

log = logging.getLogger("xtimer.ckpt")


class Persister:
    def __init__(self, module, args, rank, error_type=RuntimeError):
        self.rank = rank
        self.requested = -1  # number of the newest request
        self.step = -1  # its step
        self.copied = -1  # newest request whose snapshot the persister has copied out of shared memory
        self.done = -1  # newest request written (or failed)
        self.error = None
        self._error_type = error_type
        self._cv = threading.Condition()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p
            for p in [os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))]
            + env.get("PYTHONPATH", "").split(os.pathsep)
            if p
        )
        self._proc = subprocess.Popen(
            [sys.executable, "-m", module, json.dumps(args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
            bufsize=1,
        )
        self.pid = self._proc.pid
        self._thread = threading.Thread(target=self._read, name="xtimer-persist", daemon=True)
        self._thread.start()

    def _read(self):
        for line in self._proc.stdout:
            parts = line.rstrip("\n").split(" ", 2)
            with self._cv:
                if parts[0] == "copied":
                    self.copied = max(self.copied, int(parts[1]))
                elif parts[0] == "done":
                    self.done = max(self.done, int(parts[1]))
                elif parts[0] == "failed":
                    self.done = max(self.done, int(parts[1]))
                    self.copied = max(self.copied, int(parts[1]))
                    self.error = parts[2] if len(parts) > 2 else "the disk write failed"
                    log.error("xtimer.ckpt: %s", self.error)
                self._cv.notify_all()
        with self._cv:
            if self.done < self.requested:
                self.error = self.error or f"the persister of rank {self.rank} exited (status {self._proc.wait()})"
            self.copied = self.done = max(self.done, self.requested)
            self._cv.notify_all()

    def taken(self):
        with self._cv:
            return self.copied >= self.requested

    def wait_taken(self):
        with self._cv:
            self._cv.wait_for(lambda: self.copied >= self.requested)

    def request(self, step, extra=None):
        with self._cv:
            self.requested += 1
            self.step = step
            n = self.requested
        line = f"persist {n} {step}" + ("" if extra is None else " " + json.dumps(extra, separators=(",", ":")))
        try:
            self._proc.stdin.write(line + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            with self._cv:
                self.error = f"the persister of rank {self.rank} is gone ({e})"
                self.copied = self.done = n
            raise self._error_type(self.error)

    def wait_done(self, timeout):
        with self._cv:
            if not self._cv.wait_for(lambda: self.done >= self.requested, timeout):
                raise TimeoutError(f"xtimer.ckpt: step {self.step} still being written after {timeout} s")
            err, self.error = self.error, None
        if err:
            raise self._error_type(err)

    def close(self):
        try:
            self._proc.stdin.close()  # the persister finishes what it was asked, then exits
        except OSError:
            pass


# ---------------------------------------------------------------------------------------------
# In the persister process


def say(*words):
    sys.stdout.write(" ".join(str(w) for w in words) + "\n")
    sys.stdout.flush()


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path, write):
    """write(file) into path.tmp, fsync, rename over path (the folder's fsync is the caller's);
    returns what write returned. Whatever lies at path.tmp (a file left by a killed writer, or a
    FIFO or link planted there, which would block the open or redirect the write) is removed
    first, and the file is created anew (O_EXCL | O_NOFOLLOW)."""
    tmp = path + ".tmp"
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as f:
        out = write(f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)
    return out


def serve(persist, what):
    """The persister's loop over its stdin (see the module's text). what(step): the words of a
    failure's message before ": why"."""
    import warnings

    import torch

    torch.set_num_threads(1)
    torch.serialization.set_crc32_options(False)
    # DCP's writer asks tensor.storage() about every tensor; torch 2.8 warns about it each time.
    warnings.filterwarnings("ignore", message="TypedStorage is deprecated")
    for line in sys.stdin:
        parts = line.split(" ", 3)
        if len(parts) < 3 or parts[0] != "persist":
            continue
        n, step = parts[1], int(parts[2])
        try:
            persist(step, json.loads(parts[3]) if len(parts) > 3 else None, lambda: say("copied", n))
            say("done", n)
        except Exception as e:  # reported to the training process; the next request is served
            say("failed", n, f"{what(step)} failed: {e}".replace("\n", " "))
