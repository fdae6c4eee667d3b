#!/usr/bin/env python3
"""xtimer_run against real torchrun (PyTorch 2.x from .peers): the same DDP script (gloo, CPU,
ddp_worker.py) under both, compared.

  check_compat.py CHECK --peers DIR --bin BUILD/bin --pypath BUILD/lib/python [--lib libpyccl.so --simgpu DIR]
  CHECK: env-standalone | env-static | env-etcd | env-warm | failure | logs | launch-hang

env-*      every worker's environment, variable by variable: what each launcher added or changed
           over the environment it was given must be the same, values included, except what
           KEPT lists (launcher/run/README.md says why); init_process_group() (env://) and an
           all_reduce work unchanged. env-etcd compares ours on etcd with torchrun's c10d;
           env-warm round 1 after a worker's exit, ours started in warm interpreters.
failure    a worker raises under torch's @record, or is SIGKILLed: the same exit status and
           the same facts in the failure summary (rank, local rank, exit code, error file and its
           traceback).
logs       --log-dir/--redirects 1/--tee 2 with one restart: the same files with the same contents,
           the same lines on the terminal.
launch-hang  `xtimer_launch torchrun --nproc-per-node 4` on the simulated runtime: every rank
           timed, the hang found, every rank's stacks merged.
Skips (77) with one line when the peer environment is missing.
"""
import argparse
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from checks import check, failures, http_get, load_json, wait_for  # noqa: E402
from peers import Etcd, base_env, free_port, peers_or_skip, run  # noqa: E402

WORKER = os.path.join(HERE, "ddp_worker.py")

# What xtimer_run sets differently on purpose (launcher/run/README.md, "Compared with torchrun").
KEPT = {
    "TORCHELASTIC_USE_AGENT_STORE": "torchrun's agent hosts the TCPStore in its Python process; xtimer_run runs no "
    "Python, so rank 0 hosts it (False), and init_process_group() works unchanged",
    "LD_PRELOAD": "the xtimer library in every worker",
    "PYTHONPATH": "the Python hooks' folder (xtimer-site) first; XTIMER_PYTHON_HOOKS=0 leaves it alone",
    "XTIMER_AGENT_SOCKET": "where the workers reach the node agent",
    "XTIMER_HANG_ACTION": "a hang restarts the workers under xtimer_run",
    "XTIMER_RANK_PID": "a worker started in a warm interpreter: its pid, so that its helpers know they are not it",
}
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def worker_infos(out, label, n):
    infos = [load_json(os.path.join(out, label, f"env-{r}.json")) for r in range(n)]
    return infos if all(infos) else None


def added(info, base):
    """What the launcher set or changed over `base`, and what it removed."""
    env = info["env"]
    diff = {k: v for k, v in env.items() if base.get(k) != v}
    for k in base:
        if k not in env:
            diff[k] = None
    for k in ("LABEL", "FAULT"):  # ours, per run
        diff.pop(k, None)
    return diff


def normalise(diff, run_id_shape):
    """Values that are random by design become their shape."""
    d = dict(diff)
    if "MASTER_PORT" in d and str(d["MASTER_PORT"]).isdigit():
        d["MASTER_PORT"] = "<port>"
    rid = d.get("TORCHELASTIC_RUN_ID")
    if run_id_shape == "uuid" and rid and UUID.match(rid):
        d["TORCHELASTIC_RUN_ID"] = "<uuid>"
    ef = d.get("TORCHELASTIC_ERROR_FILE")
    if ef:
        # The random suffix may itself hold '_' (tempfile's alphabet): anchor on the run id.
        run_id = re.escape(rid) if rid else "[?]"
        m = re.search(rf"/{run_id}_[A-Za-z0-9_]+/attempt_(\d+)/(\d+)/error\.json$", ef)
        d["TORCHELASTIC_ERROR_FILE"] = (
            f"<dir>/<run id>_<random>/attempt_{m.group(1)}/{m.group(2)}/error.json" if m else ef
        )
    return d


def compare_envs(what, base, theirs, ours, run_id_shape):
    check(theirs is not None and ours is not None, f"{what}: every worker wrote its environment under both launchers")
    if theirs is None or ours is None:
        return
    for t, o in zip(theirs, ours):
        r = t["rank"]
        check(
            t["world"] == o["world"] and t["allreduce"] == o["allreduce"] and o["backend"] == "gloo",
            f"{what} rank {r}: init_process_group() and all_reduce give the same (world {o['world']}, "
            f"sum {o['allreduce']})",
        )
        a, b = normalise(added(t, base), run_id_shape), normalise(added(o, base), run_id_shape)
        for k in sorted(set(a) | set(b)):
            if k in KEPT:
                continue
            check(a.get(k) == b.get(k), f"{what} rank {r}: {k}: torchrun {a.get(k)!r}, xtimer_run {b.get(k)!r}")
        extra = sorted(k for k in KEPT if a.get(k) != b.get(k))
        print(f"     rank {r}: kept on purpose: {', '.join(f'{k}={b.get(k)!r}' for k in extra)}")


def torchrun_cmd(peers, *flags):
    return [peers.torchrun, *flags, WORKER]


def ours_cmd(args, *flags):
    return [os.path.join(args.bin, "xtimer_run"), *flags, WORKER]


def c_env_standalone(args, peers, out):
    base = base_env(out, args.pypath, XTIMER_PYTHON=peers.python)
    rc_t, _, err_t = run(
        torchrun_cmd(peers, "--standalone", "--nproc-per-node", "2"), dict(base, LABEL="torchrun"), out, "torchrun", 180
    )
    rc_o, _, err_o = run(
        ours_cmd(args, "--standalone", "--nproc-per-node", "2"), dict(base, LABEL="ours"), out, "ours", 180
    )
    check(rc_t == 0 and rc_o == 0, f"both finish with exit 0 (torchrun {rc_t}, xtimer_run {rc_o})")
    compare_envs("standalone", base, worker_infos(out, "torchrun", 2), worker_infos(out, "ours", 2), "uuid")


def two_nodes(cmds, env, out, label, timeout=240):
    procs = []
    for i, cmd in enumerate(cmds):
        o = open(os.path.join(out, f"{label}{i}.err"), "w")
        procs.append(
            subprocess.Popen(
                cmd, env=dict(env, LABEL=label), stdout=o, stderr=subprocess.STDOUT, start_new_session=True
            )
        )
    rcs = []
    for p in procs:
        try:
            rcs.append(p.wait(timeout))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            rcs.append(None)
    return rcs


def c_env_warm(args, peers, out):
    """Round 1 after a worker's exit: torchrun's fresh workers against ours, started in warm
    interpreters (launcher/run/warm_pool.h; XTIMER_WARM_DELAY=0 so that they are there)."""
    base = base_env(
        out,
        args.pypath,
        XTIMER_PYTHON=peers.python,
        FAULT="exit:1:3",
        TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",  # torchrun's restarts need it (pytorch/pytorch#135712)
        XTIMER_WARM_DELAY="0",
    )
    flags = ["--standalone", "--nproc-per-node", "2", "--max-restarts", "1"]
    rc_t, _, _ = run(torchrun_cmd(peers, *flags), dict(base, LABEL="torchrun"), out, "torchrun", 240)
    rc_o, _, err_o = run(ours_cmd(args, *flags), dict(base, LABEL="ours"), out, "ours", 240)
    check(rc_t == 0 and rc_o == 0, f"both finish with exit 0 after one restart (torchrun {rc_t}, xtimer_run {rc_o})")
    warm = re.findall(r"rank (\d) started in a warm interpreter", err_o)
    check(sorted(warm) == ["0", "1"], f"xtimer_run started both ranks of round 1 in warm interpreters ({warm})")
    theirs, ours = worker_infos(out, "torchrun", 2), worker_infos(out, "ours", 2)
    check(
        theirs is not None and ours is not None and all(i["restart"] == 1 for i in theirs + ours),
        "the environments compared are round 1's under both launchers",
    )
    compare_envs("warm restart", base, theirs, ours, "uuid")


def c_env_static(args, peers, out):
    base = base_env(out, args.pypath, XTIMER_PYTHON=peers.python)
    res = {}
    for label in ("torchrun", "ours"):
        port = str(free_port())
        cmds = []
        for i in range(2):
            flags = [
                "--nnodes",
                "2",
                "--node-rank",
                str(i),
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                port,
                "--nproc-per-node",
                "1",
                "--rdzv-id",
                "job7",
            ]
            cmds.append(torchrun_cmd(peers, *flags) if label == "torchrun" else ours_cmd(args, *flags))
        res[label] = two_nodes(cmds, base, out, label)
    check(res["torchrun"] == [0, 0] and res["ours"] == [0, 0], f"both pairs of nodes finish with exit 0 ({res})")
    compare_envs("static, 2 nodes", base, worker_infos(out, "torchrun", 2), worker_infos(out, "ours", 2), "given")


def c_env_etcd(args, peers, out):
    """Elastic rendezvous on 2 nodes: ours on etcd, torchrun's own c10d."""
    base = base_env(out, args.pypath, XTIMER_PYTHON=peers.python)
    etcd = Etcd(out)
    try:
        c10d = f"127.0.0.1:{free_port()}"
        common = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-id", "job8", "--local-addr", "127.0.0.1"]
        t = two_nodes(
            [torchrun_cmd(peers, *common, "--rdzv-backend", "c10d", "--rdzv-endpoint", c10d)] * 2, base, out, "torchrun"
        )
        o = two_nodes(
            [
                ours_cmd(
                    args,
                    *common,
                    "--rdzv-backend",
                    "etcd",
                    "--rdzv-endpoint",
                    f"127.0.0.1:{etcd.port}",
                    "--rdzv-conf",
                    "last_call_timeout=1",
                )
            ]
            * 2,
            base,
            out,
            "ours",
        )
    finally:
        etcd.stop()
    check(t == [0, 0] and o == [0, 0], f"both pairs of nodes finish with exit 0 (torchrun {t}, xtimer_run {o})")
    compare_envs(
        "elastic, 2 nodes (etcd / c10d)", base, worker_infos(out, "torchrun", 2), worker_infos(out, "ours", 2), "given"
    )


SUMMARY_FIELDS = ("rank", "exitcode", "error_file", "traceback")


def summary(err):
    """The root cause block of a torchrun-style failure summary: {field: value}, the script line,
    the traceback's last line."""
    m = re.search(r"^(\S+) FAILED$.*?Root Cause \(first observed failure\):\n\[0\]:\n(.*?)\n={20,}", err, re.S | re.M)
    if not m:
        return None
    fields = {"script": m.group(1)}
    for line in m.group(2).split("\n"):
        f = re.match(r"^  (\w+)\s*: (.*)$", line)
        if f and f.group(1) in ("time", "host", "rank", "exitcode", "error_file", "traceback"):
            fields[f.group(1)] = f.group(2).strip()
        elif line.strip():
            fields["traceback_last"] = line.strip()
    fields.setdefault("traceback_last", fields.get("traceback"))
    fields["exitcode"] = re.sub(r"\(pid: \d+\)", "(pid)", fields.get("exitcode", ""))
    if "Signal" in fields.get("traceback", ""):
        fields["traceback"] = fields["traceback_last"] = re.sub(r"PID \d+", "PID <pid>", fields["traceback"])
    ef = fields.get("error_file", "")
    fields["error_file"] = "<N/A>" if ef == "<N/A>" else re.sub(r"^.*(/attempt_\d+/\d+/error\.json)$", r"<dir>\1", ef)
    return fields


def c_failure(args, peers, out):
    # raise: an error file and its traceback; kill: none, and the signal. (A plain non-zero exit
    # is the first without an error file: covered by tests/launcher/check_run.py exhausted.)
    for fault, code in (("raise:1", 1), ("kill:1", -9)):
        res = {}
        for label in ("torchrun", "ours"):
            base = base_env(
                out,
                args.pypath,
                XTIMER_PYTHON=peers.python,
                FAULT=fault,
                LABEL=f"{label}-{fault}",
                TORCHELASTIC_ERROR_FILE=os.path.join(out, f"{label}-{fault}.parent-error.json"),
            )
            flags = ["--standalone", "--nproc-per-node", "2", "--max-restarts", "0"]
            cmd = torchrun_cmd(peers, *flags) if label == "torchrun" else ours_cmd(args, *flags)
            rc, _, err = run(cmd, base, out, f"{label}-{fault.replace(':', '_')}", 180)
            res[label] = (rc, summary(err), os.path.exists(base["TORCHELASTIC_ERROR_FILE"]))
        (rc_t, s_t, parent_t), (rc_o, s_o, parent_o) = res["torchrun"], res["ours"]
        check(rc_t == rc_o == 1, f"{fault}: both exit 1 (torchrun {rc_t}, xtimer_run {rc_o})")
        check(s_t is not None and s_o is not None, f"{fault}: both print a failure summary")
        if s_t and s_o:
            check(s_t["exitcode"].startswith(f"{code} "), f"{fault}: torchrun's summary: exitcode {s_t['exitcode']}")
            for k in ("script", "rank", "exitcode", "error_file", "traceback_last"):
                check(
                    s_t.get(k) == s_o.get(k),
                    f"{fault}: summary {k}: torchrun {s_t.get(k)!r}, xtimer_run {s_o.get(k)!r}",
                )
        check(
            parent_t == parent_o,
            f"{fault}: the root cause's error file copied to the launcher's own "
            f"TORCHELASTIC_ERROR_FILE alike (torchrun {parent_t}, xtimer_run {parent_o})",
        )


def tree(root):
    """{relative path with the run folder as <run>: content} of every file under root."""
    files = {}
    for path in glob.glob(os.path.join(root, "**"), recursive=True):
        if os.path.isfile(path):
            rel = os.path.relpath(path, root)
            rel = re.sub(r"^[^/]+_[A-Za-z0-9_]+/", "<run>/", rel)
            files[rel] = "".join(line for line in open(path, errors="replace") if not line.startswith("[Gloo]"))
    return files


def c_logs(args, peers, out):
    res = {}
    for label in ("torchrun", "ours"):
        logs = os.path.join(out, f"logs-{label}")
        # torchrun (2.8 to 2.15) shares its rendezvous store with the workers, and a restarted gloo group
        # can read the last round's addresses there (pytorch/pytorch#135712): its workaround.
        base = base_env(
            out,
            args.pypath,
            XTIMER_PYTHON=peers.python,
            FAULT="exit:1:3",
            LABEL=label,
            TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
        )
        flags = [
            "--standalone",
            "--nproc-per-node",
            "2",
            "--max-restarts",
            "1",
            "--log-dir",
            logs,
            "--redirects",
            "1",
            "--tee",
            "2",
        ]
        cmd = torchrun_cmd(peers, *flags) if label == "torchrun" else ours_cmd(args, *flags)
        rc, stdout, stderr = run(cmd, base, out, f"logs-{label}", 240)
        runs = os.listdir(logs) if os.path.isdir(logs) else []
        res[label] = (rc, tree(logs), runs, stdout, stderr)
    (rc_t, files_t, runs_t, out_t, err_t), (rc_o, files_o, runs_o, out_o, err_o) = res["torchrun"], res["ours"]
    check(rc_t == rc_o == 0, f"both finish after one restart (torchrun {rc_t}, xtimer_run {rc_o})")
    check(
        len(runs_t) == len(runs_o) == 1 and UUID.match(runs_o[0].rsplit("_", 1)[0]),
        f"one run folder <run id>_<random> under --log-dir (torchrun {runs_t}, xtimer_run {runs_o})",
    )

    # error.json of the failed round: a worker that @record saw its peer die before the launcher
    # stopped it writes one, under either launcher, as the timing falls.
    def layout(files):
        return sorted(k for k in files if "/attempt_0/" not in k or not k.endswith("error.json"))

    check(
        layout(files_t) == layout(files_o), f"the same files: torchrun {layout(files_t)}, xtimer_run {layout(files_o)}"
    )
    # The round that failed ends at a moment of its own under each launcher; the second is clean.
    for k in sorted(set(files_t) & set(files_o)):
        if "/attempt_1/" not in k:
            continue
        check(files_t[k] == files_o[k], f"{k}: the same content ({files_t[k]!r} / {files_o[k]!r})")

    def hello(text):
        return sorted(line for line in text.splitlines() if "says hello" in line)

    check(hello(out_t) == hello(out_o) == [], "--redirects 1: no worker stdout on the terminal")
    check(
        hello(err_t) == hello(err_o) and len(hello(err_o)) == 4,
        f"--tee 2: the same stderr lines on the terminal, two rounds of two workers ({hello(err_o)})",
    )


def c_launch_hang(args, peers, out):
    """The README's first example with the real torchrun: xtimer_launch preloads torchrun, whose
    4 workers (tests/launcher/elastic_hang.py on the simulated NCCL) are timed; rank 2 stalls in
    its data loader, the others wait in the allreduce: found, and all 4 ranks' stacks merged."""
    port = free_port()
    timeline = os.path.join(out, "timeline")
    env = base_env(
        out,
        args.pypath,
        LD_LIBRARY_PATH=args.simgpu,
        XTIMER_TIMELINE_PATH=timeline,
        XTIMER_METRICS_PORT=str(port),
        XTIMER_HANG_TIMEOUT="2",
        XTIMER_DUMP_WAIT="20",
    )
    cmd = [
        os.path.join(args.bin, "xtimer_launch"),
        peers.torchrun,
        "--nproc-per-node",
        "4",
        os.path.join(HERE, "..", "launcher", "elastic_hang.py"),
        args.lib,
        out,
        "--stuck-rank",
        "2",
    ]
    log = open(os.path.join(out, "launch.log"), "w")
    p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        verdicts = wait_for(lambda: glob.glob(os.path.join(timeline, "*", "verdict.json")), 120, 0.2)
        check(bool(verdicts), "the hang is found: a merged verdict is written")
        metrics = http_get(f"http://127.0.0.1:{port}/metrics") or ""
        timed = sorted({int(r) for r in re.findall(r'xtimer_op_latency_seconds\w*\{[^}]*rank="(\d+)"', metrics)})
        check(timed == [0, 1, 2, 3], f"every rank is timed (op latencies of ranks {timed} on /metrics)")
        if verdicts:
            v = load_json(verdicts[0]) or {}
            rdir = os.path.dirname(verdicts[0])
            named = any(
                s.get("rank") == 2 and any("load_batch" in str(f) for f in s.get("frames", []))
                for s in v.get("suspects", [])
            )
            check(named, f"the verdict names rank 2 in load_batch ({v.get('suspects')})")
            stacks = sorted(os.path.basename(f) for f in glob.glob(os.path.join(rdir, "*.stacktrace")))
            check(len(stacks) == 4, f"the stacks of all 4 ranks are merged ({stacks})")
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


CHECKS = {
    "env-standalone": c_env_standalone,
    "env-static": c_env_static,
    "env-warm": c_env_warm,
    "env-etcd": c_env_etcd,
    "failure": c_failure,
    "logs": c_logs,
    "launch-hang": c_launch_hang,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check", choices=sorted(CHECKS))
    ap.add_argument("--peers", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--pypath", required=True)
    ap.add_argument("--lib")
    ap.add_argument("--simgpu")
    args = ap.parse_args()
    peers = peers_or_skip(args.peers)
    out = tempfile.mkdtemp(prefix=f"xtimer-peers-{args.check}-")
    try:
        CHECKS[args.check](args, peers, out)
    finally:
        if failures:
            for name in sorted(glob.glob(os.path.join(out, "*.err")) + glob.glob(os.path.join(out, "*.log"))):
                print(f"--- {name}\n" + open(name, errors="replace").read()[-2500:])
    print(f"{len(failures)} failed" if failures else "all passed")
    if not failures:
        shutil.rmtree(out, ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
