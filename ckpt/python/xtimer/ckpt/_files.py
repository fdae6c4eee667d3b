"""The files of a checkpoint folder, read as files someone else may have put there: the one rule
for opening them (the Python side of common/regular_file.h) and the checksum of a file.

    fd = open_regular(path)             # a FIFO, device or folder is refused at once, never waited on
    size, checksum = file_checksum(fd)  # the core's checksum ("aaaa...:bbbb..." in hex), in pieces
    w = SumWriter(f)                    # a file object that checksums what is written through it

Shared by the FSDP and DeepSpeed checkpointers and their persisters.
"""
import errno
import os
import stat

from xtimer import _ckpt
from xtimer.ckpt.checkpointer import CheckpointError


def kind_of(mode):
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "not a file"


def open_regular(path, follow=True, max_bytes=None):
    """A read-only descriptor of path if it is a regular file: opened with O_NONBLOCK (a FIFO
    never blocks the open) and O_NOFOLLOW unless `follow`, then checked with fstat. Raises
    FileNotFoundError when it does not exist, CheckpointError naming it otherwise."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as e:
        if e.errno == errno.ELOOP and not follow:
            raise CheckpointError(
                f"{path} is a symbolic link; xtimer reads its own files only under their own name"
            ) from None
        raise CheckpointError(f"{path}: cannot open it: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"{path} is {kind_of(st.st_mode)}, not a regular file; remove it")
        if max_bytes is not None and st.st_size > max_bytes:
            raise CheckpointError(f"{path} is {st.st_size} bytes, more than such a file holds; is it the right file?")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _combine(first, words, second):
    """The checksum of A + B from A's (a, b), A's length in 8-byte words, and B's (a, b)."""
    m = (1 << 64) - 1
    return (first[0] + second[0]) & m, (first[1] + second[1] + words * second[0]) & m


def _hex(c):
    return "%016x:%016x" % c


class SumWriter:
    """A binary file that checksums what is written to it (the core's checksum, at memory speed;
    pieces are combined, so the bytes are never held or read again)."""

    def __init__(self, f):
        self.f = f
        self.sum = (0, 0)
        self.words = 0
        self.tail = b""  # < 8 bytes not yet summed
        self.bytes = 0

    def write(self, data):
        mv = memoryview(data).cast("B")
        n = self.f.write(mv)
        self.bytes += len(mv)
        if self.tail:
            need = 8 - len(self.tail)
            self.tail += bytes(mv[:need])
            mv = mv[need:]
            if len(self.tail) < 8:
                return n
            self._add(self.tail)
            self.tail = b""
        whole = len(mv) - len(mv) % 8
        if whole:
            self._add(mv[:whole])
        self.tail = bytes(mv[whole:])
        return n

    def _add(self, piece):
        self.sum = _combine(self.sum, self.words, _ckpt.checksum(piece))
        self.words += len(piece) // 8

    def flush(self):
        self.f.flush()

    def checksum(self):
        s = _combine(self.sum, self.words, _ckpt.checksum(self.tail)) if self.tail else self.sum
        return _hex(s)


def file_checksum(fd, chunk=1 << 20):
    """(bytes, checksum) of an open file, read from its start in chunks (each a whole number of
    8-byte words but the last, so that their checksums combine) into one buffer that stays in
    the CPU's cache. Not mapped: a file truncated under a mapping would kill the process."""
    mv = memoryview(bytearray(chunk))
    total, s = 0, (0, 0)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    except (AttributeError, OSError):
        pass
    with os.fdopen(os.dup(fd), "rb", buffering=0) as f:
        f.seek(0)
        while True:
            n = 0
            while n < chunk:
                got = f.readinto(mv[n:])
                if not got:
                    break
                n += got
            if n:
                s = _combine(s, total // 8, _ckpt.checksum(mv[:n]))
                total += n
            if n < chunk:
                return total, _hex(s)
