#!/usr/bin/env python3
"""xtimer_collector end to end with simulated agents (collector_load, real gRPC): flags and their
one-line errors, a token, a hang on 2 agents x 4 ranks where rank 5 never times out itself, the
merged round on disk, /metrics (promtool check metrics, and the expected series), the round's files
over HTTP (and nothing else), and the page in headless Chromium (ranks, verdict, screenshot).

usage: http_test.py XTIMER_COLLECTOR COLLECTOR_LOAD WORKDIR [CHROMIUM|-] [--browser-only|--no-browser]
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from collector_run import Collector  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import check, failures  # noqa: E402
from headless_chromium import run_chromium  # noqa: E402

COLLECTOR, LOAD, WORK = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])
CHROMIUM = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] != "-" else shutil.which("chromium")
BROWSER = "--no-browser" not in sys.argv


def get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
token = os.path.join(WORK, "token")
with open(token, "w") as f:
    f.write("test-token-123\n")
os.chmod(token, 0o600)

# ---- flags: each mistake is one line naming it, and a non-zero exit ----
c = Collector(COLLECTOR, WORK, "--token-file", token, env={"XTIMER_DUMP_WAIT": "10"})
empty = os.path.join(WORK, "empty")
open(empty, "w").close()
for args, want in [
    (["--bogus"], "unknown option"),
    (["--listen", "127.0.0.1:1"], "--out DIR is required"),
    (["--out", WORK + "/o2", "--listen", "localhost"], "HOST:PORT"),
    (["--out", WORK + "/o2", "--listen", "127.0.0.1:99999"], "port must be a number"),
    (["--out", WORK + "/o2", "--listen", c.target], "in use"),
    (["--out", WORK + "/o2", "--listen", "127.0.0.1:0", "--http", f"127.0.0.1:{c.http_port}"], "in use"),
    (["--out", WORK + "/o2", "--token-file", WORK + "/nonexistent"], "nonexistent does not exist"),
    (["--out", WORK + "/o2", "--token-file", empty], "is empty"),
    (["--out", WORK + "/o2", "--tls-cert", token], "go together"),
    (["--out", WORK + "/o2", "--tls-cert", token, "--tls-key", token], "not a PEM file"),
    (["--out", "/proc/no/such/dir"], "--out"),
    (["--out", WORK + "/o2", "--upload-window", "-3"], "--upload-window -3 is not a number"),
    (["--out", WORK + "/o2", "--upload-window", "8x"], "--upload-window 8x is not a number"),
]:
    p = subprocess.run([COLLECTOR, *args], capture_output=True, text=True, timeout=30)
    lines = p.stderr.strip().splitlines()
    check(
        p.returncode != 0 and len(lines) == 1 and lines[0].startswith("xtimer_collector: ") and want in lines[0],
        f"{' '.join(args)} -> one line with '{want}' (got rc {p.returncode}: {p.stderr.strip()!r})",
    )

# ---- a hang on 2 nodes x 4 ranks; rank 5 is elsewhere and never reports a hang itself ----
p = subprocess.run(
    [
        LOAD,
        "--target",
        c.target,
        "--token-file",
        token,
        "--agents",
        "2",
        "--ranks-per-agent",
        "4",
        "--processes",
        "2",
        "--period",
        "0.5",
        "--steady",
        "1.5",
        "--storm",
        "--own-dumps",
        "--culprit",
        "5",
        "--stack-kb",
        "20",
        "--out",
        c.out,
        "--metrics",
        f"127.0.0.1:{c.http_port}",
        "--collector-pid",
        str(c.proc.pid),
        "--wait",
        "30",
    ],
    capture_output=True,
    text=True,
    timeout=120,
)
print(p.stdout, p.stderr)
check(p.returncode == 0, "collector_load: nothing lost, the round is complete")
check("own dumps: 0 sent, 7 not sent" in p.stdout, "the agents' own dumps were not sent: the round asked for them")
verdicts = glob.glob(os.path.join(c.out, "*", "verdict.json"))
check(len(verdicts) == 1, f"one round folder with verdict.json: {verdicts}")
if verdicts:
    rdir = os.path.dirname(verdicts[0])
    rname = os.path.basename(rdir)
    check(re.fullmatch(r"\d{8}T\d{6}Z", rname) is not None, f"round folder named by the hang time: {rname}")
    v = json.load(open(verdicts[0]))
    check(
        v["world_size"] == 8 and v["ranks_reported"] == list(range(8)) and v["ranks_missing"] == [],
        "verdict: all 8 ranks, none missing",
    )
    s5 = [s for s in v["suspects"] if s["rank"] == 5]
    check(
        len(s5) == 1 and any("load_batch" in f for f in s5[0]["frames"]),
        f"verdict names rank 5 in load_batch: {v['suspects']}",
    )
    stacks = sorted(os.path.basename(x) for x in glob.glob(os.path.join(rdir, "*.stacktrace")))
    check(stacks == [f"{r:05d}-00008.stacktrace" for r in range(8)], f"stack files named by the collector: {stacks}")
    for f in ("py_stack.folded", "cpp_stack.folded", "py_stack.svg", "cpp_stack.svg"):
        check(os.path.getsize(os.path.join(rdir, f)) > 0, f"{f} written")
    check("load_batch" in open(os.path.join(rdir, "py_stack.folded")).read(), "py_stack.folded holds load_batch")

# ---- /metrics ----
status, ctype, body = get(c.http_port, "/metrics")
check(
    status == 200 and ctype.startswith("text/plain; version=0.0.4"), f"/metrics 200 text/plain 0.0.4 ({status} {ctype})"
)
metrics = body.decode()
open(os.path.join(WORK, "metrics.txt"), "w").write(metrics)
promtool = shutil.which("promtool")
if promtool:
    pt = subprocess.run([promtool, "check", "metrics"], input=metrics, capture_output=True, text=True, timeout=60)
    check(pt.returncode == 0, f"promtool check metrics: {pt.stdout.strip()} {pt.stderr.strip()}")
else:
    check(False, "promtool is installed (Debian: prometheus)")
for series in [
    r'^xtimer_op_latency_seconds\{rank="5",kind="collective",op="ncclAllReduce",detail="[^"]*",quantile="0.99"\} ',
    r'^xtimer_op_latency_seconds_sum\{rank="0",kind="matmul",op="cublasGemmEx",',
    r'^xtimer_op_latency_seconds_count\{rank="7",',
    r'^xtimer_op_tflops\{rank="3",kind="matmul",op="cublasLtMatmul",detail="4096 x 4096 x 4096"\} 300$',
    r'^xtimer_op_busbw_gbps\{rank="6",kind="collective",',
    r'^xtimer_rank_inflight_oldest_seconds\{rank="1",host="node-0"\} 302.1$',
    r'^xtimer_rank_hung\{rank="0",host="node-0"\} 1$',
    r'^xtimer_rank_hung\{rank="5",host="node-1"\} 0$',
    r'^xtimer_rank_dumps_total\{rank="4",',
    r'^xtimer_rank_report_age_seconds\{rank="2",',
    r"^xtimer_collector_agents_connected 0$",
    r"^xtimer_collector_ranks_known 8$",
    r"^xtimer_collector_world_size 8$",
    r'^xtimer_collector_rank_reports_total\{result="ok"\} \d+$',
    r'^xtimer_collector_uploads_total\{result="accepted"\} 8$',
    r'^xtimer_collector_uploads_total\{result="duplicate"\} 0$',  # own dumps not sent: a DUMP came
    r"^xtimer_collector_dump_commands_held_total 0$",  # 2 agents, window 16: nobody waited
    r"^xtimer_collector_upload_commands_total 0$",
    r'^xtimer_collector_uploads_refused_total\{reason="parse"\} 0$',
    r"^xtimer_collector_dump_rounds_total 1$",
    r"^xtimer_collector_hang_episodes_total 1$",
    r"^xtimer_collector_unauthenticated_calls_total 0$",
    r"^xtimer_collector_command_streams_open 0$",
]:
    check(re.search(series, metrics, re.M) is not None, f"/metrics has {series}")

# ---- the rounds' files, and nothing else ----
if verdicts:
    status, ctype, body = get(c.http_port, f"/rounds/{rname}/py_stack.svg")
    check(
        status == 200 and ctype.startswith("image/svg+xml") and b"load_batch" in body,
        f"flame graph served ({status} {ctype})",
    )
    status, ctype, body = get(c.http_port, f"/rounds/{rname}/verdict.json")
    check(status == 200 and json.loads(body)["world_size"] == 8, "verdict.json served")
    for path in [
        f"/rounds/{rname}/00005-00008.stacktrace",
        f"/rounds/{rname}/../../token",
        "/rounds/../token",
        f"/rounds/{rname}/..%2f..%2ftoken",
        "/rounds/20000101T000000Z/verdict.json",
        "/token",
        "/etc/passwd",
    ]:
        status, _, body = get(c.http_port, path)
        check(status == 404 and b"test-token" not in body, f"{path} -> 404 ({status})")
status, ctype, body = get(c.http_port, "/status.json")
st = json.loads(body)
check(status == 200 and len(st["ranks"]) == 8 and st["rounds"][0]["finished"], "status.json: 8 ranks, the round")

# ---- the page ----
status, ctype, body = get(c.http_port, "/")
page = body.decode()
check(status == 200 and ctype.startswith("text/html"), "page served as HTML")
check(len(re.findall(r'<tr class="[a-z]+" data-rank="\d+">', page)) == 8, "page lists 8 ranks")
check("<script" not in page, "page has no script")
if BROWSER and CHROMIUM:
    url = f"http://127.0.0.1:{c.http_port}/"
    code, dom = run_chromium(CHROMIUM, url, "--dump-dom")
    check(code == 0, "chromium --dump-dom ran")
    check(len(re.findall(r'data-rank="\d+"', dom)) == 8, "rendered: 8 rank rows")
    check(re.search(r'<tr class="hung" data-rank="0">', dom) is not None, "rendered: rank 0 is hung")
    check(re.search(r'<tr class="running" data-rank="5">', dom) is not None, "rendered: rank 5 runs (never timed out)")
    m = re.search(r'<div id="verdict"[^>]*>(.*?)</div>\s*(?:<h2|<p)', dom, re.S)
    check(
        m is not None and "rank 5" in m.group(1) and "load_batch" in m.group(1),
        "rendered: the verdict names rank 5 and load_batch",
    )
    check(
        re.search(r'<a href="rounds/\d{8}T\d{6}Z/py_stack.svg">', dom) is not None, "rendered: link to the flame graph"
    )
    shot = os.path.join(WORK, "page.png")
    code, _ = run_chromium(CHROMIUM, url, f"--screenshot={shot}", "--window-size=1400,900")
    png = open(shot, "rb").read() if os.path.exists(shot) else b""
    check(png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000, f"screenshot {shot} ({len(png)} bytes)")
    if verdicts:
        # The flame graph's own script runs under the collector's Content-Security-Policy.
        code, dom = run_chromium(CHROMIUM, f"http://127.0.0.1:{c.http_port}/rounds/{rname}/py_stack.svg", "--dump-dom")
        check('data-ready="1"' in dom, "flame graph served by the collector: its script ran")
        run_chromium(
            CHROMIUM,
            f"http://127.0.0.1:{c.http_port}/rounds/{rname}/py_stack.svg",
            f"--screenshot={os.path.join(WORK, 'py_stack.png')}",
            "--window-size=1200,500",
        )
elif BROWSER:
    check(False, "chromium is installed")

rc = c.stop()
check(rc == 0, f"SIGTERM: clean exit ({rc})")
log = c.log_text()
check("stopping" in log and "Traceback" not in log, "collector log says it stopped")

if failures:
    print(f"{len(failures)} check(s) failed; collector log: {c.log_path}")
    sys.exit(1)
print("all checks passed; screenshots in", WORK)
