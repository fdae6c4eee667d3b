"""The Python side of xtimer's step records, with no change to the training code.

Installed at start-up by xtimer's sitecustomize. When the process runs under libxtimer_preload.so
(which answers `xtimer_python_hello`), it reports to the library, through `xtimer_python_span`
(preload/steps/python_hooks.h):
  - every garbage collection, from gc.callbacks' "start" to its "stop" (kind 1);
  - every `__next__` of a torch DataLoader iterator on the main thread (kind 2), by wrapping
    torch.utils.data.dataloader._BaseDataLoaderIter.__next__ when that module is first imported
    (a finder on sys.meta_path that removes itself then; torch is never imported by us).
Times are time.monotonic_ns() (CLOCK_MONOTONIC, the library's clock). A span costs one ctypes
call (docs/benchmarks.md gives the figures). In a forked child (a DataLoader worker) the hooks
turn themselves off: the library does not run there.
"""
import gc
import os
import sys
import time
from _thread import get_ident

_GC, _DATA = 1, 2
_DATALOADER = "torch.utils.data.dataloader"

_span = None  # the library's xtimer_python_span, or None when off
_main = get_ident()  # sitecustomize runs on the main thread
_now = time.monotonic_ns
_gc_start = 0


def _on_gc(phase, info):
    global _gc_start
    if phase == "start":
        _gc_start = _now()
    elif _gc_start and _span is not None:
        _span(_GC, _gc_start, _now())
        _gc_start = 0


def _wrap_next(next_fn):
    def __next__(self):
        if _span is None or get_ident() != _main:
            return next_fn(self)
        begin = _now()
        try:
            return next_fn(self)
        finally:
            if _span is not None:
                _span(_DATA, begin, _now())

    __next__.__qualname__ = next_fn.__qualname__
    __next__.__doc__ = next_fn.__doc__
    __next__._xtimer_wrapped = next_fn
    return __next__


def _patch_dataloader(module):
    cls = getattr(module, "_BaseDataLoaderIter", None)
    if cls is None or hasattr(cls.__next__, "_xtimer_wrapped"):
        return
    cls.__next__ = _wrap_next(cls.__next__)


class _DataLoaderFinder:
    """Waits for torch's dataloader module, patches it right after it runs, then steps aside."""

    def find_spec(self, name, path=None, target=None):
        if name != _DATALOADER:
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        import importlib.util

        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch_dataloader(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def _off_in_child():
    global _span
    _span = None
    try:
        gc.callbacks.remove(_on_gc)
    except ValueError:
        pass


def install():
    """Installs the hooks if the library wants them; returns whether it did."""
    global _span
    try:
        import ctypes

        lib = ctypes.CDLL(None)
        hello, span = lib.xtimer_python_hello, lib.xtimer_python_span
    except (OSError, AttributeError, ImportError):
        return False  # not under libxtimer_preload.so
    hello.argtypes, hello.restype = [ctypes.c_int, ctypes.c_ulong], ctypes.c_int
    if hello(1, _main) != 1:
        return False  # XTIMER_DISABLE, XTIMER_STEPS=0 or XTIMER_PYTHON_HOOKS=0
    span.argtypes, span.restype = [ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64], None
    _span = span
    gc.callbacks.append(_on_gc)
    if _DATALOADER in sys.modules:
        _patch_dataloader(sys.modules[_DATALOADER])
    else:
        sys.meta_path.insert(0, _DataLoaderFinder())
    os.register_at_fork(after_in_child=_off_in_child)
    return True
