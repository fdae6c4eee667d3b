"""Starting the ranks of hang_rank.py's job, each under xtimer_launch (check_hang.py,
check_stuck.py): rank `stuck` stops before its allreduce of step `stuck_step` for 60 s while the
others wait for it. Each JSON line a rank prints goes to `on_message`, on a thread of its own."""
import json
import os
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))


def start_rank(args, out, env, rank, world, stuck, stuck_step, on_message, extra=()):
    """Rank `rank` of `world` (args: bin, lib; out: the job's folder, where the NCCL id is
    exchanged); `extra`: more hang_rank.py arguments. Returns the xtimer_launch process."""
    p = subprocess.Popen(
        [
            os.path.join(args.bin, "xtimer_launch"),
            sys.executable,
            os.path.join(HERE, "hang_rank.py"),
            args.lib,
            str(rank),
            str(world),
            os.path.join(out, "nccl.id"),
            "--stuck-rank",
            str(stuck),
            "--stuck-step",
            str(stuck_step),
            "--sleep",
            "60",
            *extra,
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )

    def read():
        for line in p.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            on_message(msg)

    threading.Thread(target=read, daemon=True).start()
    return p
