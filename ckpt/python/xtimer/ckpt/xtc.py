"""Reads xtimer flash checkpoint images (.xtc files, and shared-memory slots) with Python and
NumPy only; torch is used when asked for. This file has no other dependency: copy it anywhere.

    from xtc import read_xtc
    step, state, index = read_xtc("/ckpt/run1/300/rank_0.xtc")          # numpy arrays
    step, state, index = read_xtc(path, as_torch=True)                  # torch tensors

    python3 xtc.py FILE [--no-verify]     lists the entries and verifies the checksums

Format (docs/formats.md, "Flash checkpoint"): an 80-byte header, the tensor data from byte
4096, and a JSON index at the end. bfloat16 (and other dtypes NumPy lacks) come back as raw
unsigned integers of the same width unless as_torch=True; bf16_to_float32() widens bfloat16.
"""
import base64
import collections
import json
import os
import re
import stat
import struct
import sys

import numpy as np

MAGIC = b"XTIMERCK"
HEADER = struct.Struct("<8sIIqQQQQQQQ")  # 80 bytes
MASK = (1 << 64) - 1
# dtypes NumPy does not have: returned as raw unsigned integers of the same size.
RAW = {"bfloat16": "<u2", "float8_e4m3fn": "u1", "float8_e5m2": "u1", "complex32": "<u4"}


class XtcError(ValueError):
    pass


def checksum(data):
    """(a, b) over little-endian 64-bit words, zero-padded: a = sum(w_i), b = sum((i+1) * w_i),
    both mod 2**64."""
    buf = np.frombuffer(data, dtype=np.uint8)
    pad = (-len(buf)) % 8
    a = b = 0
    full = len(buf) - len(buf) % 8
    words = buf[:full].view("<u8")
    step = 1 << 21
    for start in range(0, len(words), step):
        part = words[start : start + step]
        idx = np.arange(start + 1, start + 1 + len(part), dtype=np.uint64)
        a += int(part.sum(dtype=np.uint64))
        b += int((part * idx).sum(dtype=np.uint64))
    if pad:
        last = int.from_bytes(bytes(buf[full:]) + b"\0" * pad, "little")
        a += last
        b += (len(words) + 1) * last
    return a & MASK, b & MASK


def _hex(ab):
    return "%016x:%016x" % ab


def parse_header(raw, size, what):
    if size < HEADER.size:
        raise XtcError(f"{what}: truncated (no header)")
    magic, version, hlen, step, data_off, index_off, index_len, isa, isb, hsa, hsb = HEADER.unpack(raw[:80])
    if magic != MAGIC:
        raise XtcError(f"{what}: not an xtimer checkpoint (bad magic)")
    if checksum(raw[:64]) != (hsa, hsb):
        raise XtcError(f"{what}: header checksum mismatch (the file is corrupt)")
    if version > 1:
        raise XtcError(f"{what}: format version {version} is newer than this reader understands")
    if index_off + index_len != size:
        raise XtcError(f"{what}: size {size} bytes, header says {index_off + index_len}")
    return dict(step=step, data_off=data_off, index_off=index_off, index_len=index_len, index_sum=(isa, isb))


def read_index(buf, what="image"):
    """Header and index of an image held in `buf` (bytes, mmap, numpy uint8)."""
    mv = memoryview(buf).cast("B")
    h = parse_header(bytes(mv[:80]), len(mv), what)
    raw = bytes(mv[h["index_off"] : h["index_off"] + h["index_len"]])
    if checksum(raw) != h["index_sum"]:
        raise XtcError(f"{what}: index checksum mismatch (the file is corrupt)")
    index = json.loads(raw)
    if index.get("format") != "xtimer-ckpt":
        raise XtcError(f"{what}: index format is not xtimer-ckpt")
    return h, index


def bf16_to_float32(a):
    """bfloat16 bits (uint16) -> float32, exactly."""
    return (np.asarray(a, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def read_image(buf, what="image", verify=True, as_torch=False, copy=True):
    """(step, state, index) from an image in memory."""
    h, index = read_index(buf, what)
    mv = memoryview(buf).cast("B")
    leaves = []
    for e in index["entries"]:
        start, n = e["offset"], e["nbytes"]
        if start < h["data_off"] or start + n > h["index_off"]:
            raise XtcError(f"{what}: entry {e['name']} lies outside the data area")
        raw = mv[start : start + n]
        if verify and _hex(checksum(raw)) != e["checksum"]:
            raise XtcError(f"{what}: checksum mismatch in entry {e['name']} (the file is corrupt)")
        dt = np.dtype(RAW.get(e["dtype"], e["dtype"]))
        arr = np.frombuffer(raw, dtype=dt).reshape(e["shape"])
        if copy:
            arr = arr.copy()
        if as_torch:
            arr = _to_torch(arr, e["dtype"])
        leaves.append(arr)
    root = index["tree"]["root"] if index.get("tree") else None
    return index["step"], unflatten(root, leaves, as_torch), index


def read_regular_file(path, what="checkpoint file"):
    """The bytes of a regular file. A FIFO, a device or a folder is refused at once (XtcError):
    opened with O_NONBLOCK, so a FIFO planted in a checkpoint folder cannot block the open, then
    checked with fstat before anything is read (docs/formats.md, the rule for files read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise XtcError(f"{path} does not exist") from None
    except OSError as e:
        raise XtcError(f"{what} {path}: cannot open it: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = (
                "a FIFO"
                if stat.S_ISFIFO(st.st_mode)
                else "a device"
                if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "a folder"
                if stat.S_ISDIR(st.st_mode)
                else "not a file"
            )
            raise XtcError(f"{path} is {kind}, not a regular file; only a regular file is read as a {what}")
        with os.fdopen(fd, "rb", closefd=True) as f:
            fd = -1
            return f.read(st.st_size)
    finally:
        if fd >= 0:
            os.close(fd)


def check_place(path, index):
    """A file named rank_<r>.xtc must hold rank r, one in a folder named <step> that step (a file
    copied into another step's folder is refused, never read as that step)."""
    name = os.path.basename(path)
    m = re.fullmatch(r"rank_(\d{1,9})\.xtc", name)
    if not m:
        return
    held = f"holds step {index.get('step')}, rank {index.get('rank')} of {index.get('world_size')}"
    if index.get("rank") != int(m.group(1)):
        raise XtcError(f"{path} {held}: a file of another rank renamed or copied here")
    folder = os.path.basename(os.path.dirname(path))
    if re.fullmatch(r"\d{1,18}", folder) and index.get("step") != int(folder):
        raise XtcError(f"{path} {held}: a file of another step copied or moved into folder {folder}")


def read_xtc(path, verify=True, as_torch=False):
    """(step, state, index) of one .xtc file."""
    data = read_regular_file(path)
    _, index = read_index(data, path)
    check_place(path, index)
    return read_image(data, path, verify=verify, as_torch=as_torch, copy=False)


def _to_torch(arr, dtype):
    import torch

    if dtype in RAW:  # same-width signed ints, which torch can take from NumPy, then a bit view
        signed = {"<u2": np.int16, "<u4": np.int32, "u1": np.uint8}[RAW[dtype]]
        return torch.from_numpy(arr.view(signed).copy()).view(getattr(torch, dtype))
    return torch.from_numpy(arr if arr.flags.writeable else arr.copy())


def unflatten(node, leaves, as_torch=False):
    """Rebuilds a state dict from its tree (docs/formats.md lists the node kinds)."""

    def tr():
        import torch

        return torch

    if node is None or isinstance(node, (bool, str, int)):
        return node
    if isinstance(node, dict):
        if "t" in node:
            v = leaves[node["t"]]
            if "p" in node and as_torch:
                return tr().nn.Parameter(v, requires_grad=node["p"])
            return v
        if "n" in node:
            v = leaves[node["n"]]
            return v.numpy() if hasattr(v, "numpy") else v
        if "f" in node:
            return float(node["f"])
        if "I" in node:
            return int(node["I"])
        if "l" in node:
            return [unflatten(v, leaves, as_torch) for v in node["l"]]
        if "u" in node:
            return tuple(unflatten(v, leaves, as_torch) for v in node["u"])
        if "d" in node:
            return {unflatten(k, leaves, as_torch): unflatten(v, leaves, as_torch) for k, v in node["d"]}
        if "o" in node:
            od = collections.OrderedDict(
                (unflatten(k, leaves, as_torch), unflatten(v, leaves, as_torch)) for k, v in node["o"]
            )
            if "m" in node:
                od._metadata = unflatten(node["m"], leaves, as_torch)
            return od
        if "c" in node:
            return complex(float(node["c"][0]), float(node["c"][1]))
        if "b" in node:
            return base64.b64decode(node["b"])
        if "dt" in node:
            return getattr(tr(), node["dt"]) if as_torch else node["dt"]
        if "dv" in node:
            return tr().device(node["dv"]) if as_torch else node["dv"]
        if "sz" in node:
            return tr().Size(node["sz"]) if as_torch else tuple(node["sz"])
        if "ns" in node:
            return np.frombuffer(base64.b64decode(node["ns"][1]), dtype=np.dtype(node["ns"][0]))[0]
    raise XtcError(f"unknown node in the tree: {str(node)[:80]}")


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    if len(args) != 1:
        print("usage: xtc.py FILE [--no-verify]", file=sys.stderr)
        return 2
    try:
        step, _, index = read_xtc(args[0], verify="--no-verify" not in argv)
    except (XtcError, OSError) as e:
        print(f"xtc: {e}", file=sys.stderr)
        return 1
    print(f"{args[0]}: step {step}, rank {index['rank']} of {index['world_size']}, {len(index['entries'])} entries")
    for e in index["entries"]:
        print(f"  {e['name']:40s} {e['dtype']:9s} {str(e['shape']):18s} {e['device']:7s} {e['nbytes']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
