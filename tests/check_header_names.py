#!/usr/bin/env python3
"""No two headers of the source tree share a file name.

  check_header_names.py SOURCE_DIR    exit 1 with one line per shared name

An include names a header by its path ("slowdown/slowdown_verdict.h"), but a reader, a debugger,
an editor's file list and the compiler's messages show its name alone: two verdict.h files are two
things a newcomer must tell apart. Headers are .h, .hpp and .hh files; build trees (build*/) and
hidden folders (.git, .peers) are not looked at.
Before the check runs on the tree it runs on a small made-up one with each kind of fault, so a
check that has stopped catching them fails too.
"""
import os
import sys

HEADER_SUFFIXES = (".h", ".hpp", ".hh")


def skipped(folder):
    """Folders whose headers are not the project's: build trees, .git, .peers and other hidden ones."""
    return folder.startswith((".", "build"))


def shared_names(paths):
    """`paths`: relative paths of the tree's files. Returns {name: [paths]} for every header name
    that more than one path has."""
    by_name = {}
    for path in paths:
        parts = path.split("/")
        if any(skipped(p) for p in parts[:-1]) or not parts[-1].endswith(HEADER_SUFFIXES):
            continue
        by_name.setdefault(parts[-1], []).append(path)
    return {name: sorted(p) for name, p in by_name.items() if len(p) > 1}


def self_test():
    """The check must refuse each kind of fault (and accept a clean tree)."""
    clean = ["a/one.h", "a/one.cc", "b/two.h", "b/one.cc", "build/a/one.h", "build-asan/b/two.h", ".peers/x/one.h"]
    faults = {
        "same name in two folders": clean + ["b/one.h"],
        "same .hpp name": clean + ["a/three.hpp", "c/d/three.hpp"],
    }
    if shared_names(clean):
        return f"a clean tree fails: {shared_names(clean)}"
    for what, tree in faults.items():
        if not shared_names(tree):
            return f"the check no longer catches: {what}"
    return None


def main():
    if len(sys.argv) != 2:
        print("usage: check_header_names.py SOURCE_DIR", file=sys.stderr)
        return 2
    broken = self_test()
    if broken:
        print(f"check_header_names.py: self-test: {broken}")
        return 1
    root = sys.argv[1]
    if not os.path.isdir(root):
        print(f"check_header_names.py: {root} is not a folder; give the source tree's root")
        return 2
    paths = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not skipped(d))
        rel = os.path.relpath(folder, root)
        paths += [f if rel == "." else f"{rel}/{f}" for f in files]
    clashes = shared_names(paths)
    for name, where in sorted(clashes.items()):
        print(f"header name {name} is used {len(where)} times ({', '.join(where)}): rename all but one")
    if clashes:
        return 1
    count = sum(1 for p in paths if p.endswith(HEADER_SUFFIXES))
    print(f"{count} headers, every name once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
