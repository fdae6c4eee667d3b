"""A worker for tests/launcher/check_warm.py: writes what it sees to $OUT/dump-<rank>-<restart>.json
(sys.argv, sys.orig_argv, sys.path, __file__, the working folder, its environment, its session),
prints one line on stdout and one on stderr, then:
  - restart 0: rank 0 fails (exit 3) once rank 1 has written its dump, so the next round starts
    every rank again: in warm interpreters under xtimer_run;
  - restart 1: imports a module no warm interpreter imports, runs a function of __main__ in a
    multiprocessing pool of the "spawn" kind and in a forked process, iterates a torch DataLoader
    with 2 workers when torch is there, and holds its spawned helpers alive while the agent could
    hear them; with PYCCL (tests/preload/pyccl.cc) it then joins a simulated NCCL communicator and
    all-reduces once; each result goes into the dump. With RAISE_AT_1, rank 1 then raises.
The dump also says whether a CUDA library was mapped before the script ran.
"""
import json
import multiprocessing
import os
import sys
import time

OUT = os.environ["OUT"]
RANK = int(os.environ["RANK"])
RESTART = int(os.environ["TORCHELASTIC_RESTART_COUNT"])


def square(x):
    return x * x


def helper_env(_):
    # In a spawned helper: what the library reads to know it is not the rank.
    return os.environ.get("XTIMER_RANK_PID"), os.getpid()


def cuda_mapped():
    with open("/proc/self/maps") as f:
        return any("libcuda" in line or "libnccl" in line for line in f)


CUDA_BEFORE = cuda_mapped()


def state():
    main = sys.modules["__main__"]
    return {
        "cuda_before": CUDA_BEFORE,
        "argv": sys.argv,
        "orig_argv": sys.orig_argv,
        "path": sys.path,
        "file": __file__,
        "main_file": getattr(main, "__file__", None),
        "name": __name__,
        "spec": None if __spec__ is None else [__spec__.name, __spec__.origin],
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "session_leader": os.getsid(0) == os.getpid(),
        "unbuffered": sys.stdout.write_through,
    }


def extras():
    out = {"minidom_before": "xml.dom.minidom" in sys.modules}
    import xml.dom.minidom

    out["minidom"] = xml.dom.minidom.parseString("<a>1</a>").documentElement.firstChild.data
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        out["spawn"] = pool.map(square, [1, 2, 3])
        out["spawn_env"] = pool.map(helper_env, [0])[0]
        time.sleep(float(os.environ.get("HOLD_S", "1")))  # its helpers have loaded the library
    fork = multiprocessing.get_context("fork").Process(target=square, args=(3,))
    fork.start()
    fork.join()
    out["fork_exit"] = fork.exitcode
    try:
        import torch
        from torch.utils.data import DataLoader
    except ImportError:
        out["dataloader"] = "no torch"
    else:
        loader = DataLoader(list(range(8)), batch_size=4, num_workers=2)
        out["dataloader"] = [b.tolist() for b in loader]
        out["torch"] = torch.__version__
    lib = os.environ.get("PYCCL")
    if lib:
        import ctypes

        ccl = ctypes.CDLL(lib)
        ids = os.path.join(OUT, "nccl-id")
        out["pyccl_init"] = ccl.pyccl_init(RANK, int(os.environ["WORLD_SIZE"]), ids.encode(), 1)
        out["pyccl_allreduce"] = ccl.pyccl_allreduce()
        time.sleep(float(os.environ.get("HOLD_S", "1")))  # its link thread greets the agent
    return out


def main():
    dump = state()
    if RESTART >= 1:
        dump["extras"] = extras()
    path = os.path.join(OUT, f"dump-{RANK}-{RESTART}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(dump, f, indent=1)
    os.rename(path + ".tmp", path)
    print(f"rank {RANK} restart {RESTART} on stdout")
    print(f"rank {RANK} restart {RESTART} on stderr", file=sys.stderr)
    if RESTART >= 1 and RANK == 1 and os.environ.get("RAISE_AT_1"):
        while not os.path.exists(os.path.join(OUT, "dump-0-1.json")):
            time.sleep(0.05)
        raise ValueError("raised on purpose")
    if RESTART == 0:
        if RANK == 0:
            while not os.path.exists(os.path.join(OUT, "dump-1-0.json")):
                time.sleep(0.05)
            sys.exit(3)
        time.sleep(120)  # stopped with the round


if __name__ == "__main__":
    main()
