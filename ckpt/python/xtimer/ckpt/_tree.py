"""The structure of a state dict as JSON, with its tensors taken out.

A state dict is a tree of dicts, lists and tuples whose leaves are tensors and plain values.
`flatten` returns the tree as JSON-able nodes plus the list of array leaves; `unflatten`
rebuilds it. Node encoding (docs/formats.md, "tree"):

  null, true, false, "text", 12        None, bools, strings, ints within int64
  {"I": "123..."}                      any other int
  {"f": "0.1"}                         float (repr, so nan/inf and every bit survive)
  {"c": ["1.0", "-2.0"]}               complex
  {"b": "base64"}                      bytes
  {"l": [...]}, {"u": [...]}           list, tuple
  {"d": [[k, v], ...]}                 dict (keys are nodes too: ints stay ints)
  {"o": [[k, v], ...], "m": node}      OrderedDict, with its `_metadata` (module versions)
  {"t": i}, {"t": i, "p": true}        tensor entry i of the index; "p": an nn.Parameter
                                       (value: requires_grad)
  {"n": i}                             numpy array entry i
  {"dt": "float32"}, {"dv": "cuda:0"}  torch.dtype, torch.device
  {"sz": [2, 3]}                       torch.Size
  {"ns": ["<f8", "base64"]}            numpy scalar
"""
import base64
import collections

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def _torch():
    try:
        import torch

        return torch
    except ImportError:  # the NumPy-only path
        return None


def _np():
    try:
        import numpy

        return numpy
    except ImportError:
        return None


def _key_name(k):
    return str(k).replace("/", "%2F")


class Flattener:
    """Collects array leaves: `leaves` is a list of (name, object) in entry order."""

    def __init__(self):
        self.leaves = []
        self.torch = _torch()
        self.np = _np()

    def leaf(self, name, obj, kind):
        self.leaves.append((name, obj))
        return {kind: len(self.leaves) - 1}

    def node(self, obj, path):
        torch, np = self.torch, self.np
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, int):
            return obj if INT64_MIN <= obj <= INT64_MAX else {"I": str(obj)}
        if isinstance(obj, float):
            return {"f": repr(obj)}
        if torch is not None:
            if isinstance(obj, torch.Tensor):
                n = self.leaf(path, obj, "t")
                if isinstance(obj, torch.nn.Parameter):
                    n["p"] = bool(obj.requires_grad)
                return n
            if isinstance(obj, torch.dtype):
                return {"dt": str(obj).replace("torch.", "")}
            if isinstance(obj, torch.device):
                return {"dv": str(obj)}
            if isinstance(obj, torch.Size):
                return {"sz": list(obj)}
        if np is not None:
            if isinstance(obj, np.ndarray):
                return self.leaf(path, obj, "n")
            if isinstance(obj, np.generic):
                a = np.asarray(obj)
                if a.dtype.hasobject:
                    raise TypeError(f"{path or '<root>'}: cannot save a numpy object scalar")
                return {"ns": [a.dtype.str, base64.b64encode(a.tobytes()).decode()]}
        if isinstance(obj, complex):
            return {"c": [repr(obj.real), repr(obj.imag)]}
        if isinstance(obj, (bytes, bytearray)):
            return {"b": base64.b64encode(bytes(obj)).decode()}
        if isinstance(obj, list):
            return {"l": [self.node(v, f"{path}/{i}" if path else str(i)) for i, v in enumerate(obj)]}
        if isinstance(obj, tuple):
            return {"u": [self.node(v, f"{path}/{i}" if path else str(i)) for i, v in enumerate(obj)]}
        if isinstance(obj, dict):
            items = []
            for k, v in obj.items():
                sub = f"{path}/{_key_name(k)}" if path else _key_name(k)
                items.append([self.node(k, sub + "#key"), self.node(v, sub)])
            if isinstance(obj, collections.OrderedDict):
                n = {"o": items}
                meta = getattr(obj, "_metadata", None)
                if meta is not None:
                    n["m"] = self.node(meta, (path + "/" if path else "") + "_metadata")
                return n
            return {"d": items}
        raise TypeError(
            f"{path or '<root>'}: cannot save a {type(obj).__module__}.{type(obj).__qualname__}; a state dict may "
            "hold tensors, numpy arrays, numbers, strings, bytes, None and dicts/lists/tuples of them"
        )


def flatten(obj):
    f = Flattener()
    return f.node(obj, ""), f.leaves


def unflatten(node, leaves):
    """leaves[i] is the value of entry i (already a tensor or array)."""
    from .xtc import unflatten as _unflatten

    return _unflatten(node, leaves, as_torch=_torch() is not None)
