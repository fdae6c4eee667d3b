"""Hand-made stack files of a 4-rank hang: ranks 0, 1, 3 wait in ncclAllReduce
#1234 on comm 3a9f0c12, rank 2 sleeps in load_batch (train.py:88). Shared by the viewer's tests."""
import json
import os


def native(function, module, file=None, line=None):
    f = {"module": module, "offset": "0x1a2b0", "function": function, "inlined": False}
    if file:
        f["file"], f["line"] = file, line
    return f


def rank_file(rank, world=4, version=1):
    libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    if rank == 2:
        py = [
            {"function": "<module>", "file": "/job/train.py", "line": 160},
            {"function": "train_step", "file": "/job/train.py", "line": 140},
            {"function": "load_batch", "file": "/job/train.py", "line": 88},
        ]
        nat = [
            native("_start", "/usr/bin/python3.11"),
            native("_PyEval_EvalFrameDefault", "/usr/bin/python3.11"),
            native("clock_nanosleep", libc),
        ]
        ops = []
    else:
        py = [
            {"function": "<module>", "file": "/job/train.py", "line": 160},
            {"function": "train_step", "file": "/job/train.py", "line": 142},
            {
                "function": "all_reduce",
                "file": "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py",
                "line": 2050,
            },
        ]
        nat = [
            native("_start", "/usr/bin/python3.11"),
            native("_PyEval_EvalFrameDefault", "/usr/bin/python3.11"),
            native(
                "c10d::ProcessGroupNCCL::allreduce(std::vector<at::Tensor, std::allocator<at::Tensor> >&)",
                "/usr/lib/libtorch_cuda.so",
                "ProcessGroupNCCL.cpp",
                3100,
            ),
            native("ncclAllReduce", "/usr/lib/libnccl.so.2"),
            {"module": "/usr/lib/libnccl.so.2", "offset": "0x77f0"},
        ]  # unsymbolised
        ops = [
            {
                "name": "ncclAllReduce",
                "kind": "collective",
                "stream": "0x5581a0c0",
                "comm": "3a9f0c12",
                "comm_rank": rank,
                "comm_size": 4,
                "seq": 1234,
                "peer": -1,
                "bytes": 67108864,
                "state": "running",
                "in_flight_s": 302.1,
            }
        ]
    threads = [
        {
            "tid": 4000 + rank,
            "name": "python3",
            "main": True,
            "holds_gil": rank == 2,
            "state": "S",
            "native": nat,
            "python": py,
        },
        {
            "tid": 5000 + rank,
            "name": "pool",
            "main": False,
            "holds_gil": None,
            "state": "S",
            "native": [native("clone3", libc), native("start_thread", libc), native("pthread_cond_wait", libc)],
            "python": [],
        },
        # Hostile text: separators, markup, control characters, a path.
        {
            "tid": 6000 + rank,
            "name": "odd",
            "main": False,
            "holds_gil": None,
            "state": "R",
            "native": [
                native('weird;name\nwith <script>alert(1)</script> & "q"', "../../etc/passwd"),
                native("   ", ""),
            ],
            "python": [],
        },
    ]
    return {
        "format": "xtimer-stacktrace",
        "version": version,
        "rank": rank,
        "world_size": world,
        "local_rank": rank,
        "host": "node-a",
        "pid": 4000 + rank,
        "reason": "hang" if rank != 2 else "signal",
        "time": "2026-11-22T10:15:30.123Z",
        "symbolized": True,
        "process_state": {"code": "S", "name": "sleeping"},
        "inflight_ops": ops,
        "threads": threads,
    }


def write_hang(folder):
    os.makedirs(folder, exist_ok=True)
    for r in range(4):
        with open(os.path.join(folder, f"{r:05d}-00004.stacktrace"), "w") as f:
            f.write(json.dumps(rank_file(r), indent=1))
