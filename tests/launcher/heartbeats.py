"""Shell workers for xtimer_run's re-rendezvous tests (check_run.py, netns_run.py): each writes a
heartbeat line every 0.2 s, and the tests read them back to see who ran in which group.

    from heartbeats import WORKER, read, in_world, groups
"""
import os

# Every 0.2 s: node ($NODE, set by the test), GROUP_RANK, WORLD_SIZE, MASTER_PORT (one per
# round), wall time. Lines are short, so the appends of several workers do not mix.
WORKER = (
    'while :; do echo "$NODE $GROUP_RANK $WORLD_SIZE $MASTER_PORT $(date +%s.%N)" >> "$OUT/hb.txt"; ' "sleep 0.2; done"
)


def read(out):
    rows = []
    try:
        with open(os.path.join(out, "hb.txt")) as f:
            for line in f:
                p = line.split()
                if len(p) == 5:
                    rows.append(
                        {"node": int(p[0]), "rank": int(p[1]), "world": int(p[2]), "port": int(p[3]), "t": float(p[4])}
                    )
    except OSError:
        pass
    return rows


def in_world(out, world, after):
    """The nodes that ran a worker in a world of `world` after `after`."""
    return {r["node"] for r in read(out) if r["world"] == world and r["t"] > after}


def groups(out):
    """[(port, whole, what)] for every group that ran: whole when it agrees on one world size and
    each of its ranks ran on exactly one node (the job never ran a split group)."""
    seen = {}
    for r in read(out):
        g = seen.setdefault(r["port"], {"world": set(), "ranks": {}})
        g["world"].add(r["world"])
        g["ranks"].setdefault(r["rank"], set()).add(r["node"])
    out_rows = []
    for port, g in sorted(seen.items()):
        world = next(iter(g["world"]))
        whole = (
            len(g["world"]) == 1
            and set(g["ranks"]) == set(range(world))
            and all(len(n) == 1 for n in g["ranks"].values())
        )
        out_rows.append((port, whole, f"world {sorted(g['world'])}, ranks -> nodes {g['ranks']}"))
    return out_rows
