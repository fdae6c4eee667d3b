#!/usr/bin/env python3
"""The flame graph in headless Chromium: it renders (a screenshot is kept in the test's output
folder), its script runs, the tooltip and search elements exist, and search and zoom work (driven
through the URL: #s=REGEX, #z=TEXT, then the DOM is dumped).

usage: browser_test.py VIEWER WORKDIR [CHROMIUM]
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hang_stacks import write_hang  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import check, failures  # noqa: E402
from headless_chromium import run_chromium  # noqa: E402

VIEWER, WORK = sys.argv[1], sys.argv[2]
CHROMIUM = sys.argv[3] if len(sys.argv) > 3 else shutil.which("chromium") or "/usr/bin/chromium"


shutil.rmtree(WORK, ignore_errors=True)
stacks, out = os.path.join(WORK, "stacks"), os.path.join(WORK, "out")
write_hang(stacks)
subprocess.run([VIEWER, "--path", stacks, "--out", out, "--quiet"], check=True, timeout=120)

for kind in ("py", "cpp"):
    svg = os.path.join(out, f"{kind}_stack.svg")
    url = "file://" + svg
    shot = os.path.join(WORK, f"{kind}_stack.png")
    code, _ = run_chromium(CHROMIUM, url, f"--screenshot={shot}", "--window-size=1200,400")
    check(code == 0 and os.path.exists(shot), f"{kind}: screenshot written ({code})")
    if os.path.exists(shot):
        png = open(shot, "rb").read()
        check(
            png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10000, f"{kind}: screenshot is a real PNG ({len(png)} bytes)"
        )
    code, dom = run_chromium(CHROMIUM, url, "--dump-dom")
    check(code == 0, f"{kind}: --dump-dom ran")
    check('data-ready="1"' in dom, f"{kind}: the script ran (init marked the document ready)")
    check(re.search(r'<g id="tooltip"', dom) is not None, f"{kind}: tooltip element exists")
    check(re.search(r'<input[^>]*id="search"', dom) is not None, f"{kind}: search box exists")
    check(len(re.findall(r'data-fx="', dom)) >= 5, f"{kind}: frames got their zoom data from the script")

# Search and zoom through the URL.
svg = "file://" + os.path.join(out, "py_stack.svg")
code, dom = run_chromium(CHROMIUM, svg + "#s=load_batch", "--dump-dom")
matches = re.findall(r'<g class="f[^"]*match[^"]*"[^>]*><title>([^<]*)', dom)
check(len(matches) == 1 and matches[0].startswith("load_batch@"), f"search highlights load_batch only: {matches}")
m = re.search(r'<text id="matched"[^>]*>([^<]*)<', dom)
check(m is not None and m.group(1).startswith("Matched: 25.0%"), f"search shows the share: {m and m.group(1)}")
code, dom = run_chromium(CHROMIUM, svg + "#z=train_step@/job/train.py:140", "--dump-dom")
hidden = re.findall(r'<g class="f[^"]*hide[^"]*"[^>]*><title>([^<]*)', dom)
check(any(h.startswith("all_reduce@") for h in hidden), f"zoom hides the frames beside the zoomed one: {hidden}")
check(not any(h.startswith("load_batch@") for h in hidden), "zoom keeps the zoomed frame's children")
check(re.search(r'id="unzoom" class="button"', dom) is not None, "zoom shows 'Reset zoom'")
run_chromium(
    CHROMIUM,
    svg + "#z=train_step@/job/train.py:140",
    f"--screenshot={os.path.join(WORK, 'py_stack_zoomed.png')}",
    "--window-size=1200,400",
)

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all checks passed; screenshots in", WORK)
