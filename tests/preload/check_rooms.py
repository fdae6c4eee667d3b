#!/usr/bin/env python3
"""The preload's rooms depend one way: no #include runs from a lower room to a higher one.

  check_rooms.py SOURCE_DIR            check the tree (exit 1 with one line per broken rule)
  check_rooms.py SOURCE_DIR --graph    also print which room includes which, and how often

Every C/C++ source under preload/ sits in one room (a folder named in ROOMS), and includes
preload code only by its full path ("preload/<room>/<file>"), from its own room or a lower one.
ROOMS is the order, lowest first; preload/README.md, "Rooms", says what each one holds.
Before the check runs on the tree it runs on a small made-up one with each kind of fault, so a
check that has stopped catching them fails too.
"""
import os
import re
import sys

# Lowest first: a room may include its own files and those of the rooms before it.
ROOMS = ["base", "capture", "graphs", "timing", "hang", "steps", "link", "start", "hooks"]

SOURCE_SUFFIXES = (".h", ".cc", ".c", ".cpp", ".hpp")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def room_of(rel):
    """The room of a path relative to preload/, or None when it is in none."""
    parts = rel.split("/")
    return parts[0] if len(parts) > 1 and parts[0] in ROOMS else None


def check(sources):
    """`sources`: {path relative to preload/: text}. Returns (problems, edges), where edges
    counts the includes from room to room."""
    problems, edges = [], {}
    for rel in sorted(sources):
        room = room_of(rel)
        if room is None:
            problems.append(
                f"preload/{rel}: in no room; put it in one of {', '.join(ROOMS)} (tests/preload/check_rooms.py)"
            )
            continue
        for n, line in enumerate(sources[rel].splitlines(), 1):
            m = INCLUDE.match(line)
            if m is None:
                continue
            target = m.group(1)
            where = f"preload/{rel}:{n}"
            if not target.startswith("preload/"):
                if "/" not in target or target.startswith(("./", "../")):
                    problems.append(
                        f'{where}: includes "{target}"; name preload code by its full path, "preload/<room>/<file>"'
                    )
                continue  # another folder of the project (common/...) or a system header
            to = room_of(target[len("preload/") :])
            if to is None:
                problems.append(f'{where}: includes "{target}", which is in no room')
                continue
            edges[(room, to)] = edges.get((room, to), 0) + 1
            if ROOMS.index(to) > ROOMS.index(room):
                allowed = ", ".join(ROOMS[: ROOMS.index(room) + 1])
                problems.append(
                    f'{where}: includes "{target}": room {room} is below {to}; it may include only {allowed}'
                )
    return problems, edges


def self_test():
    """The check must refuse each kind of fault (and accept a clean tree)."""
    clean = {
        "base/a.h": "",
        "timing/b.h": '#include "preload/base/a.h"\n#include <vector>\n#include "common/log.h"\n',
        "hooks/c.cc": '#include "preload/timing/b.h"\n#include "preload/hooks/c.h"\n',
        "hooks/c.h": "",
    }
    faults = {
        "upward include": {**clean, "base/a.h": '#include "preload/timing/b.h"\n'},
        "upward include, indented": {**clean, "timing/b.h": '  #  include "preload/hooks/c.h"\n'},
        "file in no room": {**clean, "loose.cc": ""},
        "include of a file in no room": {**clean, "hooks/c.h": '#include "preload/loose.h"\n'},
        "relative include": {**clean, "timing/b.h": '#include "a.h"\n'},
        "unknown room": {**clean, "attic/old.cc": ""},
    }
    if check(clean)[0]:
        return [f"self-test: a clean tree was refused: {check(clean)[0]}"]
    return [f"self-test: {name} was not refused" for name, tree in faults.items() if not check(tree)[0]]


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    root = os.path.join(argv[1], "preload")
    if not os.path.isdir(root):
        print(f"check_rooms: {root} is not a folder: give the source tree's root")
        return 2
    failed = self_test()
    sources = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.endswith(SOURCE_SUFFIXES):
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    sources[os.path.relpath(path, root).replace(os.sep, "/")] = fh.read()
    problems, edges = check(sources)
    if "--graph" in argv[2:]:
        for (a, b), n in sorted(edges.items(), key=lambda e: (ROOMS.index(e[0][0]), ROOMS.index(e[0][1]))):
            print(f"{a:>8} -> {b:<8} {n}")
    for p in failed + problems:
        print(p)
    if failed or problems:
        return 1
    print(f"check_rooms: {len(sources)} sources in {len(ROOMS)} rooms ({' < '.join(ROOMS)}); no include runs upward")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
