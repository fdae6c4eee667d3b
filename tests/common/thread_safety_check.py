#!/usr/bin/env python3
"""The lock rules, checked by Clang's thread-safety analysis (common/thread_annotations.h).

  thread_safety_check.py SOURCE_DIR BUILD_DIR

1. Every mutex of the components (collector/, launcher/, ckpt/, preload/, common/, slowdown/)
   is the annotated Mutex of common/mutex.h: a bare std::mutex or std::condition_variable there is
   named and fails the check, so no lock escapes the analysis.
2. Every source of the build that includes common/mutex.h (directly or through its own header) is
   compiled by clang++ -fsyntax-only with the build's own flags (compile_commands.json) plus
   -Wthread-safety -Wthread-safety-beta -Werror (beta: the ACQUIRED_BEFORE order): a field read
   without its lock, or a function called without the lock it requires, fails it.
3. The analysis can fail: tests/common/thread_safety_negative.cc compiles as written and must not
   compile with -DXT_BREAK_RULE=N for each of its broken rules.

Exits 77 (ctest's "skipped") when no clang++ is installed; GCC builds ignore the annotations.
"""
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

COMPONENTS = ("collector/", "launcher/", "ckpt/", "preload/", "common/", "slowdown/")
BARE = re.compile(r"\bstd::(mutex|condition_variable|lock_guard|unique_lock|scoped_lock)\b")
ANALYSIS = ["-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Wthread-safety-beta", "-Werror"]
# The broken rules of thread_safety_negative.cc and the diagnostic each must give.
NEGATIVE = {
    1: "requires holding mutex",  # a guarded field read without its lock
    2: "requires holding mutex",  # a REQUIRES function called without the lock
    3: "must be acquired before",  # ACQUIRED_BEFORE taken in the wrong order
    4: "cannot call function",  # an EXCLUDES function called with the lock held
}


def find_clang():
    for name in ("clang++", "clang++-14", "clang++-15", "clang++-16"):
        path = shutil.which(name)
        if path:
            return path
    return None


def tracked_sources(src):
    out = subprocess.run(["git", "-C", src, "ls-files", "*.cc", "*.h"], capture_output=True, text=True)
    if out.returncode != 0:
        return None
    return [f for f in out.stdout.split() if f.startswith(COMPONENTS)]


def bare_locks(src, files):
    bad = []
    for f in files:
        if f == "common/mutex.h":
            continue  # the wrapper itself
        with open(os.path.join(src, f), encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                code = line.split("//", 1)[0]
                if BARE.search(code):
                    bad.append(f"{f}:{n}: {line.strip()}")
    return bad


def includes_mutex(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return '#include "common/mutex.h"' in fh.read()
    except OSError:
        return False


def analysis_command(clang, entry):
    args = entry.get("arguments") or shlex.split(entry["command"])
    # Drop the compiler (and a launcher such as ccache before it), the output and dependency files.
    i = 0
    while i < len(args) and not args[i].startswith("-"):
        i += 1
    out = [clang]
    skip = False
    for a in args[i:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD") or a == entry["file"] or a.startswith("-W"):
            continue
        out.append(a)
    return out + ANALYSIS + [entry["file"]]


def run(cmd, cwd):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, build = (os.path.abspath(a) for a in sys.argv[1:3])
    clang = find_clang()
    if clang is None:
        print("thread_safety_check: no clang++ installed (apt-get install clang-14): skipped")
        return 77
    files = tracked_sources(src)
    if files is None:
        print(f"thread_safety_check: {src} is not a git checkout: no list of sources: skipped")
        return 77
    failed = False

    bad = bare_locks(src, files)
    if bad:
        failed = True
        print("thread_safety_check: locks the analysis cannot see (use Mutex, MutexLock, CondVar of common/mutex.h):")
        for b in bad:
            print("  " + b)

    db = os.path.join(build, "compile_commands.json")
    if not os.path.exists(db):
        print(f"thread_safety_check: {db} is missing: configure with CMAKE_EXPORT_COMPILE_COMMANDS=ON")
        return 1
    with open(db) as f:
        entries = json.load(f)
    todo, seen = [], set()
    for e in entries:
        path = os.path.normpath(os.path.join(e.get("directory", build), e["file"]))
        rel = os.path.relpath(path, src)
        if not rel.startswith(COMPONENTS) or path in seen:
            continue
        header = os.path.splitext(path)[0] + ".h"
        if includes_mutex(path) or includes_mutex(header):
            seen.add(path)
            todo.append((rel, e))
    if not todo:
        print("thread_safety_check: no source of the build includes common/mutex.h")
        return 1
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(
            pool.map(lambda t: (t[0], run(analysis_command(clang, t[1]), t[1].get("directory", build))), todo)
        )
    for rel, (rc, text) in sorted(results):
        if rc != 0:
            failed = True
            print(f"thread_safety_check: {rel} breaks a lock rule:\n{text}")
    print(f"thread_safety_check: {len(todo)} annotated sources analysed with {os.path.basename(clang)}")

    negative = os.path.join(src, "tests", "common", "thread_safety_negative.cc")
    base = [clang, "-std=c++20", "-I", src, negative] + ANALYSIS
    rc, text = run(base, src)
    if rc != 0:
        failed = True
        print(f"thread_safety_check: thread_safety_negative.cc must compile as written:\n{text}")
    for rule, want in NEGATIVE.items():
        rc, text = run(base + [f"-DXT_BREAK_RULE={rule}"], src)
        if rc == 0 or want not in text:
            failed = True
            print(f"thread_safety_check: broken rule {rule} was not refused with '{want}':\n{text}")
    if not failed:
        print(f"thread_safety_check: the {len(NEGATIVE)} broken rules of thread_safety_negative.cc are refused")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
