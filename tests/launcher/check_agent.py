#!/usr/bin/env python3
"""End-to-end checks of xtimer_launch as node agent, with and without xtimer_collector, on the
simulated runtime.

  check_agent.py CHECK --bin BUILD/bin --lib libpyccl.so --simgpu DIR
  CHECK: passthrough | embedded | two-agents | collector-restart | no-collector | ckpt-saver | hostile-paths
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import check, failures, free_port, http_get, load_json, promtool_ok, start_collector, wait_for  # noqa: E402
from node_ranks import Agents, agent_command, agent_env  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def metric(text, series):
    """The value of an unlabelled series in Prometheus text, or None."""
    m = re.search(r"^" + re.escape(series) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


class Job(Agents):
    """Agents (xtimer_launch) each running node_ranks.py for one simulated node."""

    def __init__(self, args, out, nodes, nproc, extra_env, rank_args, name="agent"):
        super().__init__()
        self.ports = []
        world = nodes * nproc
        for node in range(nodes):
            port = free_port()
            self.ports.append(port)
            env = agent_env(
                LD_LIBRARY_PATH=args.simgpu,
                XTIMER_TIMELINE_PATH=os.path.join(out, f"node{node}"),
                XTIMER_METRICS_PORT=str(port),
                **extra_env,
            )
            hang_rank = os.path.join(HERE, "..", "preload", "hang_rank.py")
            idfile = os.path.join(out, f"{name}.nccl.id")
            cmd = agent_command(
                args.bin, nproc, node, world, [hang_rank, args.lib, "{rank}", "{world}", idfile] + rank_args
            )
            self.spawn(cmd, env, os.path.join(out, f"{name}{node}.log"))


class Collector:
    def __init__(self, args, out, port=None, http=None, extra=()):
        self.extra = list(extra)
        self.port = port or free_port()
        self.http = http or free_port()
        self.out = out
        self.args = args
        self.start()

    def start(self):
        self.proc = start_collector(self.args.bin, self.out, self.port, self.http, self.extra, log_mode="a", wait_s=10)

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def rounds(self):
        return sorted(glob.glob(os.path.join(self.out, "collected", "*", "verdict.json")))


def verdict_names(verdict, rank, function):
    for s in verdict.get("suspects", []):
        if s.get("rank") == rank and any(function in str(f) for f in s.get("frames", [])):
            return True
    return False


def hang_began(out, nodes, step, stuck):
    """When the last rank other than `stuck` entered the allreduce of `step` (wall clock)."""
    times = []
    for n in range(nodes):
        for line in open(os.path.join(out, f"agent{n}.log")):
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get("step") == step and msg.get("rank") != stuck:
                times.append(msg["allreduce_at"])
    return max(times) if times else None


def check_passthrough(args):
    launch = os.path.join(args.bin, "xtimer_launch")
    env = dict(os.environ, XTIMER_METRICS_PORT="0")
    env.pop("XTIMER_AGENT_SOCKET", None)
    # Each command writes down the socket its agent gave it, so that the checks look at this
    # test's agents only (other tests start agents in /tmp at the same time).
    seen = tempfile.NamedTemporaryFile("r", prefix="xtimer-sockets-", delete=False).name
    note = f'echo "$XTIMER_AGENT_SOCKET" >> {seen}; '
    p = subprocess.run([launch, "sh", "-c", note + "exit 7"], env=env)
    check(p.returncode == 7, "exit status passed through (7)")
    p = subprocess.run([launch, "sh", "-c", note + "kill -TERM $$"], env=env)
    check(p.returncode == -signal.SIGTERM, f"death by signal passed through ({p.returncode})")
    # (the sleep's output goes nowhere, so it cannot hold the test's output pipe open after)
    p = subprocess.Popen([launch, "sh", "-c", note + "trap 'exit 42' TERM; sleep 30 >/dev/null 2>&1 & wait"], env=env)
    time.sleep(1)
    p.send_signal(signal.SIGTERM)
    check(p.wait(timeout=10) == 42, "SIGTERM sent to xtimer_launch reaches the command")
    # A nested xtimer_launch that started an agent of its own would give its command another socket.
    p = subprocess.run(
        [launch, "sh", "-c", note + f'echo "$XTIMER_AGENT_SOCKET"; {launch} sh -c \'echo "$XTIMER_AGENT_SOCKET"\''],
        env=env,
        capture_output=True,
        text=True,
    )
    lines = p.stdout.split()
    check(
        p.returncode == 0 and lines and lines[0].startswith("/tmp/xtimer-agent-"),
        "the command finds its agent through XTIMER_AGENT_SOCKET",
    )
    check(len(lines) == 2 and lines[0] == lines[1], f"a nested xtimer_launch starts no second agent ({lines})")
    p = subprocess.run([launch, "no-such-command"], env=env, capture_output=True, text=True)
    check(p.returncode == 127 and "cannot run no-such-command" in p.stderr, "a missing command: 127 and one line")
    with open(seen) as f:
        sockets = [line.strip() for line in f if line.strip()]
    os.unlink(seen)
    check(
        len(sockets) == 4 and not any(os.path.exists(os.path.dirname(s)) for s in sockets),
        f"the agent removes its socket folder ({len(sockets)} agents)",
    )


def check_embedded(args):
    out = tempfile.mkdtemp(prefix="xtimer-agent-embedded-")
    job = Job(
        args,
        out,
        1,
        4,
        {"XTIMER_HANG_TIMEOUT": "2", "XTIMER_DUMP_WAIT": "20"},
        ["--stuck-rank", "2", "--stuck-step", "3", "--sleep", "60"],
    )
    try:
        timeline = os.path.join(out, "node0")
        t0 = time.time()
        verdicts = wait_for(lambda: glob.glob(os.path.join(timeline, "*", "verdict.json")), 30)
        check(bool(verdicts), f"the embedded collector merged a round ({time.time() - t0:.1f} s after start)")
        if verdicts:
            v = load_json(verdicts[0])
            rdir = os.path.dirname(verdicts[0])
            check(verdict_names(v, 2, "load_batch"), f"verdict names rank 2 in load_batch: {v.get('suspects')}")
            check(len(glob.glob(os.path.join(rdir, "*.stacktrace"))) == 4, "stacks of all 4 ranks, rank 2's included")
            check(os.path.exists(os.path.join(rdir, "py_stack.svg")), "flame graphs written")
        metrics = http_get(f"http://127.0.0.1:{job.ports[0]}/metrics")
        check(metrics is not None, "the agent serves /metrics")
        if metrics:
            promtool_ok(metrics, "agent /metrics")
            check(
                'xtimer_rank_hung{rank="0"' in metrics and "xtimer_op_latency_seconds" in metrics,
                "agent /metrics has the ranks' hang state and op latencies",
            )
    finally:
        job.kill()
    if not failures:
        shutil.rmtree(out, ignore_errors=True)


def check_setup_hang(args):
    """The start-up hang: rank 3 is still loading its data (no CUDA call yet) while ranks 0-2 wait
    for it in ncclCommInitRank. Their watchdogs count set-up as blocking; rank 3 said hello to
    the agent at load, so the dump round reaches it through its dump signal; the verdict says the
    job is in communicator set-up and names rank 3 in load_dataset."""
    out = tempfile.mkdtemp(prefix="xtimer-agent-setup-")
    timeout = 2
    job = Job(
        args,
        out,
        1,
        4,
        # A dump round that waited for an unreachable rank would take XTIMER_DUMP_WAIT (60 s).
        {"XTIMER_HANG_TIMEOUT": str(timeout), "XTIMER_DUMP_WAIT": "60"},
        ["--stuck-rank", "3", "--stuck-before-init", "--sleep", "60"],
    )
    try:
        timeline = os.path.join(out, "node0")
        t0 = time.time()
        verdicts = wait_for(lambda: glob.glob(os.path.join(timeline, "*", "verdict.json")), 40)
        check(bool(verdicts), "a merged verdict is written while ranks 0-2 wait in ncclCommInitRank")
        if verdicts:
            took = time.time() - t0
            written = os.path.getmtime(verdicts[0])
            v = load_json(verdicts[0])
            rdir = os.path.dirname(verdicts[0])
            check(v.get("phase") == "setup", f"the verdict's phase is set-up ({v.get('phase')})")
            check(
                (v.get("setup") or {}).get("call") == "ncclCommInitRank"
                and (v.get("setup") or {}).get("waiting") == [0, 1, 2],
                f"ranks 0-2 wait in ncclCommInitRank: {v.get('setup')}",
            )
            check([s.get("rank") for s in v.get("suspects", [])] == [3], f"rank 3 is the suspect: {v.get('suspects')}")
            check(verdict_names(v, 3, "load_dataset"), f"the verdict names rank 3 in load_dataset: {v.get('suspects')}")
            check(not v.get("ranks_missing"), f"no rank is missing: {v.get('ranks_missing')}")
            stacks = sorted(os.path.basename(f) for f in glob.glob(os.path.join(rdir, "*.stacktrace")))
            check(stacks == [f"{r:05d}-00004.stacktrace" for r in range(4)], f"stacks of all 4 ranks: {stacks}")
            check(any("communicator set-up" in line for line in v.get("summary", [])), "the summary says set-up")
            began = hang_setup_began(out, 3)
            # At the timeout, not after the round's 60 s wait for rank 3 (nor when rank 3 gets there,
            # 60 s): 20 s past the timeout is a margin no scheduler delay reaches.
            check(
                began is not None and written - began <= timeout + 20,
                f"verdict within timeout + 20 s of ranks 0-2 entering set-up: "
                f"{written - began if began else float('nan'):.1f} s",
            )
            print(
                f"figure: set-up hang (timeout {timeout} s): verdict {took:.1f} s after the job started, "
                f"{written - began if began else float('nan'):.1f} s after the last waiting rank entered set-up"
            )
    finally:
        job.kill()
    if not failures:
        shutil.rmtree(out, ignore_errors=True)


def hang_setup_began(out, stuck):
    """When the last rank other than `stuck` went into communicator set-up (wall clock)."""
    times = []
    for line in open(os.path.join(out, "agent0.log")):
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if "init_at" in msg and msg.get("rank") != stuck:
            times.append(msg["init_at"])
    return max(times) if len(times) == 3 else None


def check_two_agents(args):
    out = tempfile.mkdtemp(prefix="xtimer-two-agents-")
    # One agent uploads at a time: the other holds its stacks until the collector's UPLOAD.
    col = Collector(args, out, extra=["--upload-window", "1"])
    timeout = 2
    job = Job(
        args,
        out,
        2,
        4,
        {"XTIMER_HANG_TIMEOUT": str(timeout), "XTIMER_DUMP_WAIT": "20", "XTIMER_COLLECTOR": f"127.0.0.1:{col.port}"},
        ["--stuck-rank", "5", "--stuck-step", "3", "--sleep", "60"],
    )
    try:
        rounds = wait_for(col.rounds, 40)
        check(bool(rounds), "the collector merged a round")
        if rounds:
            v = load_json(rounds[0])
            rdir = os.path.dirname(rounds[0])
            check(verdict_names(v, 5, "load_batch"), f"verdict names rank 5 in load_batch: {v.get('suspects')}")
            stacks = sorted(os.path.basename(f) for f in glob.glob(os.path.join(rdir, "*.stacktrace")))
            check(stacks == [f"{r:05d}-00008.stacktrace" for r in range(8)], f"stacks of all 8 ranks: {stacks}")
            five = load_json(os.path.join(rdir, "00005-00008.stacktrace")) or {}
            check(five.get("reason") == "request", "rank 5 (never timed out itself) dumped on the collector's request")
            # The hang began when the last of the other ranks entered step 3's allreduce (each
            # rank prints when it does); the merged round must exist within timeout + 5 s.
            entered = hang_began(out, 2, step=3, stuck=5)
            done = os.path.getmtime(rounds[0])
            check(
                entered is not None and done - entered <= timeout + 5,
                f"merged {done - (entered or 0):.1f} s after the hang began (limit {timeout + 5} s)",
            )
        for port, who in ((job.ports[0], "agent 0"), (job.ports[1], "agent 1"), (col.http, "collector")):
            m = http_get(f"http://127.0.0.1:{port}/metrics")
            check(m is not None, f"{who} serves /metrics")
            if m:
                promtool_ok(m, f"{who} /metrics")
                want = 'xtimer_rank_hung{rank="0"' if who != "agent 1" else 'xtimer_rank_hung{rank="4"'
                check(want in m and "xtimer_op_latency_seconds_count" in m, f"{who} /metrics has rank series")
        m = http_get(f"http://127.0.0.1:{col.http}/metrics") or ""
        check(all(f'xtimer_rank_up{{rank="{r}"' in m for r in range(8)), "collector /metrics covers all 8 ranks")
        # Hang reports carry state only; the op statistics of the full reports before stay.
        check(
            all(f'xtimer_op_latency_seconds_count{{rank="{r}"' in m for r in range(8)),
            "collector /metrics keeps every rank's op statistics after the hang",
        )
        # Window 1: an agent asked while the other uploads holds its stacks until UPLOAD. Whether
        # that happens depends on timing: an agent is asked with its own hang report, and the
        # first agent may be done by then (its ranks' own dumps are ready at once).
        held, granted = metric(m, "xtimer_collector_dump_commands_held_total"), metric(
            m, "xtimer_collector_upload_commands_total"
        )
        check(
            held in (0, 1) and granted == held,
            f"window 1: every agent told to hold its stacks was told UPLOAD ({held} held, {granted} UPLOAD)",
        )
        # The ranks' own hang dumps are not sent besides the round's copies: 8 uploads, no duplicate.
        check(
            '\nxtimer_collector_uploads_total{result="accepted"} 8\n' in m
            and '\nxtimer_collector_uploads_total{result="duplicate"} 0\n' in m,
            "each rank's stacks were uploaded once: "
            + " ".join(l for l in m.splitlines() if l.startswith("xtimer_collector_uploads_total")),
        )
    finally:
        job.kill()
        col.kill()
    if not failures:
        shutil.rmtree(out, ignore_errors=True)


def check_collector_restart(args):
    out = tempfile.mkdtemp(prefix="xtimer-restart-")
    col = Collector(args, out)
    env = {"XTIMER_HANG_TIMEOUT": "2", "XTIMER_DUMP_WAIT": "15", "XTIMER_COLLECTOR": f"127.0.0.1:{col.port}"}
    # A healthy job: 60 steps of 0.25 s; the collector dies and comes back meanwhile.
    job = Job(args, out, 2, 2, env, ["--steps", "60", "--step-time", "0.25"])
    try:
        time.sleep(3)
        col.kill()
        time.sleep(3)
        col.start()
        codes = job.wait(120)
        check(codes == [0, 0], f"the job finished normally across a collector restart ({codes})")
        logs = "".join(open(os.path.join(out, f"agent{n}.log")).read() for n in range(2))
        check(logs.count("connected to the collector") >= 4, "both agents connected, and reconnected after the restart")
        # A later hang is still merged by the restarted collector.
        job2 = Job(
            args,
            out,
            2,
            2,
            dict(env),
            ["--stuck-rank", "3", "--stuck-step", "8", "--steps", "12", "--step-time", "0.25", "--sleep", "60"],
            name="second",
        )
        try:
            time.sleep(1)
            col.kill()
            col.start()
            rounds = wait_for(col.rounds, 40)
            check(
                bool(rounds) and verdict_names(load_json(rounds[-1]), 3, "load_batch"),
                "a hang after the restart is merged and names rank 3",
            )
        finally:
            job2.kill()
    finally:
        job.kill()
        col.kill()
    if not failures:
        shutil.rmtree(out, ignore_errors=True)


def check_no_collector(args):
    out = tempfile.mkdtemp(prefix="xtimer-nocollector-")
    env = {"XTIMER_COLLECTOR": f"127.0.0.1:{free_port()}"}  # nothing listens there
    t0 = time.time()
    job = Job(args, out, 1, 2, env, ["--steps", "10"])
    try:
        codes = job.wait(60)
        check(codes == [0], f"no collector: the job is unaffected ({codes}, {time.time() - t0:.1f} s)")
        log = open(os.path.join(out, "agent0.log")).read()
        check(log.count("cannot register with") == 1, "one line says the collector cannot be reached")
    finally:
        job.kill()
    if not failures:
        shutil.rmtree(out, ignore_errors=True)


def check_ckpt_saver(args):
    """The agent is the node's checkpoint saver: a rank killed right after a memory save still
    gets its snapshot on disk, written by the agent, and no standalone saver is started."""
    out = tempfile.mkdtemp(prefix="xtimer-agent-ckpt-")
    shm = os.path.join(out, "shm")
    os.makedirs(shm)
    script = f"""
import os, signal, torch
from xtimer.ckpt import Checkpointer, StorageType
ck = Checkpointer({os.path.join(out, "ckpt")!r})
state = {{"w": torch.arange(1000, dtype=torch.float32), "step": 7}}
ck.save_checkpoint(7, state, storage_type=StorageType.MEMORY)
os.kill(os.getpid(), signal.SIGKILL)  # dies before any persist
"""
    env = dict(
        os.environ,
        XTIMER_CKPT_SHM_DIR=shm,
        XTIMER_METRICS_PORT="0",
        RANK="0",
        WORLD_SIZE="1",
        PYTHONPATH=os.path.join(os.path.dirname(args.bin), "lib", "python"),
    )
    env.pop("XTIMER_AGENT_SOCKET", None)
    p = subprocess.run(
        [os.path.join(args.bin, "xtimer_launch"), "/usr/bin/python3", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    check(p.returncode == -signal.SIGKILL, f"the rank died of SIGKILL and xtimer_launch says so ({p.returncode})")
    xtc = os.path.join(out, "ckpt", "7", "rank_0.xtc")
    check(os.path.exists(xtc), "the agent persisted the dead rank's in-memory snapshot before exiting")
    inspect = subprocess.run(
        [os.path.join(args.bin, "xtimer_ckpt"), "inspect", os.path.join(out, "ckpt")], capture_output=True, text=True
    )
    check(inspect.returncode == 0, f"xtimer_ckpt inspect verifies it: {inspect.stdout.strip()[-200:]}")
    check(not os.path.exists(os.path.join(shm, "xtimer-ckpt-saver.log")), "no standalone saver was started")
    if not failures:
        shutil.rmtree(out, ignore_errors=True)


def check_hostile_paths(args):
    """A dump_written message naming a FIFO, /dev/zero or a symbolic link: the agent refuses each
    in one line without reading it (no blocked thread, no memory growth) and still exits
    promptly on SIGTERM. Before the common file rule, the FIFO blocked the symbolising thread
    (and with it SIGTERM) until someone wrote to it, and /dev/zero grew the agent by GBs."""
    out = tempfile.mkdtemp(prefix="xtimer-agent-hostile-")
    fifo = os.path.join(out, "planted.fifo")
    os.mkfifo(fifo)
    real = os.path.join(out, "real.stacktrace")
    with open(real, "w") as f:
        f.write("{}")
    link = os.path.join(out, "link.stacktrace")
    os.symlink(real, link)
    ready = os.path.join(out, "sent")
    script = f"""
import json, os, socket, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(os.environ["XTIMER_AGENT_SOCKET"])
for path in ["/dev/zero", {fifo!r}, {link!r}]:
    s.send(json.dumps({{"type": "dump_written", "path": path, "rank": 0, "world_size": 1, "request_id": "",
                        "pid": os.getpid()}}).encode())
open({ready!r}, "w").close()
time.sleep(600)
"""
    env = dict(os.environ, XTIMER_METRICS_PORT="0")
    env.pop("XTIMER_AGENT_SOCKET", None)
    log_path = os.path.join(out, "agent.log")
    with open(log_path, "w") as log:
        p = subprocess.Popen(
            [os.path.join(args.bin, "xtimer_launch"), sys.executable, "-c", script],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        check(wait_for(lambda: os.path.exists(ready), 30), "the rank sent its three messages")
        refused = lambda: open(log_path).read().count("not sent to the collector") >= 3  # noqa: E731
        wait_for(refused, 30)
        text = open(log_path).read()
        check("/dev/zero is a character device, not a regular file" in text, "/dev/zero refused in one line")
        check(f"{fifo} is a FIFO, not a regular file" in text, "the FIFO refused in one line")
        check(f"{link} is a symbolic link" in text, "the symbolic link refused in one line")
        check(p.poll() is None, f"xtimer_launch still runs the command ({p.poll()})")
        with open(f"/proc/{p.pid}/status") as f:
            rss = re.search(r"VmRSS:\s+(\d+)", f.read())
        rss_kb = int(rss.group(1)) if rss else 0
        check(rss_kb < 512 * 1024, f"the agent did not grow reading /dev/zero ({rss_kb // 1024} MiB resident)")
        p.send_signal(signal.SIGTERM)
        try:
            code = p.wait(timeout=30)
            check(True, f"xtimer_launch exits on SIGTERM ({code}) with the FIFO never written")
        except subprocess.TimeoutExpired:
            check(False, "xtimer_launch exits on SIGTERM with the FIFO never written (still running after 30 s)")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if not failures:
        shutil.rmtree(out, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check")
    ap.add_argument("--bin", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--simgpu", required=True)
    args = ap.parse_args()
    {
        "passthrough": check_passthrough,
        "embedded": check_embedded,
        "setup-hang": check_setup_hang,
        "two-agents": check_two_agents,
        "collector-restart": check_collector_restart,
        "no-collector": check_no_collector,
        "ckpt-saver": check_ckpt_saver,
        "hostile-paths": check_hostile_paths,
    }[args.check](args)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
