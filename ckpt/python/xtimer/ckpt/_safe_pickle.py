"""Reading pickles that someone else may have written: only allowed classes are built.

A snapshot in shared memory or a sidecar file on disk can be written by another user of the node
(`/dev/shm` is writable by everyone). A stock `pickle.loads` of such bytes calls any function the
bytes name, so it would run that user's code in the training job. Here only the classes a
snapshot format needs can be named (Python's documented way: `Unpickler.find_class`); a pickle
naming anything else raises `UnsafePickle`, which names the class and what was being read, and
the caller falls back to the next usable copy.

    from . import _safe_pickle
    _safe_pickle.allow(SomeDataclass, SomeEnum)          # once, at import of the format's module
    obj = _safe_pickle.loads(data, what="the snapshot of rank 3 in /dev/shm/...")

Allowed by default: Python's containers and numbers, NumPy arrays and scalars, torch's dtypes,
sizes, devices, layouts and memory formats. Every other class is allowed by name, never by module:
a module such as `torch` also holds functions that load and run code.
"""
import io
import pickle

from .checkpointer import CheckpointError


class UnsafePickle(CheckpointError):
    """The pickle names a class outside the allow-list, or is not a readable pickle."""


_ALLOWED = set()  # (module, qualified name)


def allow(*objects):
    """Allows these classes (or enum members' classes, dtypes, functions known to be pure
    constructors) to be named by a pickle read here."""
    for obj in objects:
        _ALLOWED.add((obj.__module__, obj.__qualname__))


def allow_names(*pairs):
    """Allows (module, name) pairs that are not importable objects here (for example torch's
    dtypes, which pickle as `torch.float32`, or a class under an older module path)."""
    _ALLOWED.update(pairs)


allow_names(
    *(("builtins", n) for n in ("set", "frozenset", "slice", "complex", "bytearray", "range")),
    ("_codecs", "encode"),  # bytes in protocol 2
    ("collections", "OrderedDict"),
    ("collections", "defaultdict"),
    ("collections", "deque"),
    ("datetime", "datetime"),
    ("datetime", "timedelta"),
)
# NumPy arrays and scalars, under both module paths (numpy 1.x `core`, 2.x `_core`).
for _core in ("numpy.core", "numpy._core"):
    allow_names(
        (_core + ".multiarray", "_reconstruct"), (_core + ".multiarray", "scalar"), (_core + ".numeric", "_frombuffer")
    )
allow_names(("numpy", "ndarray"), ("numpy", "dtype"))


def _allow_torch():
    try:
        import torch
    except ImportError:
        return
    allow(torch.Size, torch.device)
    for name in dir(torch):  # dtypes, layouts and memory formats pickle as attributes of torch
        value = getattr(torch, name, None)
        if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
            allow_names(("torch", name))


_allow_torch()


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, what, persistent_load=None):
        super().__init__(file)
        self._what = what
        if persistent_load is not None:
            self.persistent_load = persistent_load

    def find_class(self, module, name):
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if (module, name) == ("builtins", "getattr"):
            return self._enum_member
        raise UnsafePickle(
            "%s names %s.%s, which a checkpoint may not contain here (only containers, numbers, "
            "strings, NumPy and torch types, and the format's own classes are read from files and "
            "shared memory that other users could write); it is not used" % (self._what, module, name)
        )

    def _enum_member(self, cls, name, *default):
        """getattr as a pickle names it for an Enum member (Python 3.11 pickles one as
        `getattr(TheEnum, "name")`): only a member of an allowed Enum, never any other attribute."""
        import enum

        if (
            not default
            and isinstance(cls, type)
            and issubclass(cls, enum.Enum)
            and (cls.__module__, cls.__qualname__) in _ALLOWED
            and isinstance(name, str)
            and name in cls.__members__
        ):
            return cls.__members__[name]
        raise UnsafePickle(
            "%s calls getattr(%r, %r), which a checkpoint may not do here (only a member of an allowed Enum "
            "is read this way); it is not used" % (self._what, cls, name)
        )


def load(file, what, persistent_load=None):
    """Reads one pickle from a binary file object; raises UnsafePickle (a CheckpointError) for a
    class outside the allow-list or a pickle that is cut or corrupt."""
    try:
        return _Unpickler(file, what, persistent_load).load()
    except UnsafePickle:
        raise
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        ImportError,
        IndexError,
        KeyError,
        MemoryError,
    ) as e:
        raise UnsafePickle("%s is not a readable pickle (%s: %s)" % (what, type(e).__name__, e)) from None


def loads(data, what, persistent_load=None):
    """`load` from bytes (or anything with the buffer protocol)."""
    return load(io.BytesIO(memoryview(data).cast("B")), what, persistent_load)
