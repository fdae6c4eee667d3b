"""A warm interpreter of xtimer_run (launcher/run/warm_pool.h): imports the modules named on its
command line, says it is ready, waits for a worker's round, then becomes that worker.

  python -u warm_worker.py torch torch._dynamo ...      (XTIMER_WARM_FD: the hand-over socket)

The hand-over (4 bytes of length, little-endian, then NUL-terminated strings; the worker's stdout
and stderr ride with the first bytes as SCM_RIGHTS): the working folder, the number N of
arguments, the N arguments after `python -u` ("script.py", args... or "-m", "module", args...),
then the environment's KEY=VALUE entries. The worker then sees what `python -u script` started
fresh would: a session of its own, that environment (and no other variable), that working folder,
sys.argv, sys.orig_argv, sys.path[0], __file__ and __name__ == "__main__". What this interpreter
printed while importing is written to the worker's stdout and stderr first. One thing differs: an
uncaught exception's traceback is printed without this file's and runpy's frames, but the
interpreter's own last frame cannot be hidden from a debugger.

Nothing here may touch CUDA, NCCL or the job's rendezvous before the hand-over; a module that fails
to import is skipped (the script's own import will say why).
"""
import os
import sys

_HERE = os.path.abspath(__file__)


def _capture():
    """fd 1 and 2 into memory files until the hand-over; returns them."""
    files = []
    for fd in (1, 2):
        m = os.memfd_create(f"xtimer-warm-{fd}", os.MFD_CLOEXEC)
        os.dup2(m, fd)
        files.append(m)
    return files


def _receive(sock):
    import socket

    head, fds, _, _ = socket.recv_fds(sock, 4, 2)
    while head and len(head) < 4:
        head += sock.recv(4 - len(head))
    if len(head) < 4:  # the pool let this interpreter go
        os._exit(0)
    size = int.from_bytes(head, "little")
    chunks, got = [], 0
    while got < size:
        chunk = sock.recv(min(size - got, 1 << 20))
        if not chunk:
            os._exit(0)
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks), fds


def _become(msg, fds, captured):
    import ctypes

    parts = [os.fsdecode(p) for p in msg.split(b"\0")[:-1]]
    cwd, argc = parts[0], int(parts[1])
    argv, env = parts[2 : 2 + argc], parts[2 + argc :]
    os.setsid()
    for fd, new in zip((1, 2), fds):
        os.dup2(new, fd)
        if new not in (1, 2):
            os.close(new)
    for fd, m in zip((1, 2), captured):
        os.lseek(m, 0, os.SEEK_SET)
        while True:
            data = os.read(m, 1 << 16)
            if not data:
                break
            os.write(fd, data)
        os.close(m)
    libc = ctypes.CDLL(None)
    libc.clearenv()
    os.environ.clear()
    os.environ.update(kv.split("=", 1) for kv in env if "=" in kv)
    # Its processes started with its environment (a DataLoader worker, a spawned helper) are not
    # the rank: the library tells them by this (preload/start/lifecycle.cc).
    os.environ["XTIMER_RANK_PID"] = str(os.getpid())
    if cwd:
        os.chdir(cwd)
    handover = getattr(libc, "xtimer_python_handover", None)
    if handover is not None:
        handover()  # the preloaded library: greets the node agent as this rank
    return argv


def _run(argv):
    import runpy

    sys.orig_argv = sys.orig_argv[:2] + list(argv)
    if argv[0] == "-m":
        sys.argv = ["-m"] + argv[2:]
        sys.path[0] = os.getcwd()
        runpy._run_module_as_main(argv[1], alter_argv=True)  # what `python -m` calls
    else:
        # As Python runs a script, which runpy.run_path does not quite (it puts the path in
        # sys.argv[0] too): sys.argv[0] as given, __file__ absolute, a __main__ of its own.
        import builtins
        import importlib.machinery
        import io
        import types

        path = os.path.abspath(argv[0])
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.realpath(argv[0]))
        with io.open_code(path) as f:
            code = compile(f.read(), path, "exec", dont_inherit=True)
        main = types.ModuleType("__main__")
        main.__dict__.update(
            __file__=path,
            __cached__=None,
            __builtins__=builtins,
            __loader__=importlib.machinery.SourceFileLoader("__main__", path),
        )
        sys.modules["__main__"] = main
        exec(code, main.__dict__)


def _trimmed(tb):
    """The traceback from the worker's own first frame on."""
    import runpy

    def ours(name):
        return os.path.abspath(name) == _HERE or name in ("<frozen runpy>", getattr(runpy, "__file__", None))

    while tb is not None and ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb


def main():
    sock_fd = int(os.environ.pop("XTIMER_WARM_FD"))
    captured = _capture()
    for name in sys.argv[1:]:
        try:
            __import__(name)
        except BaseException:  # noqa: BLE001 - a module that does not import here is skipped
            pass
    import socket

    sock = socket.socket(fileno=sock_fd)
    try:
        sock.sendall(b"R")
    except OSError:
        pass  # the hand-over came while it imported: it waits in the socket, the pool's end is closed
    msg, fds = _receive(sock)
    sock.close()
    argv = _become(msg, fds, captured)
    try:
        _run(argv)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as e:  # noqa: BLE001 - printed as Python would, less our frames
        e.__traceback__ = _trimmed(e.__traceback__)  # what the hook prints, since Python 3.11
        sys.excepthook(type(e), e, e.__traceback__)
        sys.exit(1)


if __name__ == "__main__":
    main()
