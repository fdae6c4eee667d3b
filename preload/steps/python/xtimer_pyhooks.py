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

With XTIMER_DESYNC on it also gives each collective its Python call site, for the fingerprints
the node agent compares (preload/timing/call_sites.h): the torch.distributed collectives are
wrapped when torch.distributed.distributed_c10d is first imported (and DDP's
torch.distributed._broadcast_coalesced when torch.distributed is), and torch.autograd.backward
when torch.autograd is. A wrapper finds the innermost frame outside torch and xtimer, "func
(file:line)", registers it once (`xtimer_python_site_id`) and sets it for the call's duration
(`xtimer_python_site`): on its own thread for a collective, process-wide for a backward pass,
whose all-reduces DDP issues from autograd's threads. Two ctypes calls and a short frame walk per
collective.
"""
import functools
import gc
import os
import sys
import time
from _thread import get_ident

_GC, _DATA = 1, 2
_ABI, _WANT_SPANS, _WANT_SITES = 2, 1, 2  # preload/steps/python_hooks.h
_THREAD_SITE, _BACKWARD_SITE = 0, 1
_DATALOADER = "torch.utils.data.dataloader"
_DISTRIBUTED = "torch.distributed"
_C10D = "torch.distributed.distributed_c10d"
_AUTOGRAD = "torch.autograd"
# torch.distributed's collectives, as distributed_c10d defines them (a name it lacks is skipped).
_COLLECTIVES = (
    "all_reduce",
    "all_reduce_coalesced",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_coalesced",
    "_all_gather_base",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "_reduce_scatter_base",
    "broadcast",
    "reduce",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "scatter",
    "barrier",
    "all_gather_object",
    "broadcast_object_list",
    "gather_object",
    "scatter_object_list",
)
_INTERNAL = ("torch", "xtimer", "xtimer_pyhooks")  # packages whose frames are never a call site
_MAX_SITES = 1000  # distinct sites remembered (the library keeps 1024)

_span = None  # the library's xtimer_python_span, or None when off
_set_site = None  # the library's xtimer_python_site, or None when off
_site_id = None  # the library's xtimer_python_site_id
_internal_code = {}  # code object -> whether its module is torch's or xtimer's
_site_ids = {}  # (code object, line) -> site id
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


def _site(frame):
    """The id of the innermost frame from `frame` outwards outside torch and xtimer; 0: none."""
    while frame is not None:
        code = frame.f_code
        internal = _internal_code.get(code)
        if internal is None:
            module = frame.f_globals.get("__name__") or ""
            internal = module.partition(".")[0] in _INTERNAL or code.co_filename.startswith("<frozen")
            _internal_code[code] = internal
        if not internal:
            key = (code, frame.f_lineno)
            site = _site_ids.get(key)
            if site is None:
                if len(_site_ids) >= _MAX_SITES:
                    return 0
                name = code.co_filename.rpartition("/")[2]
                site = _site_id(f"{code.co_name} ({name}:{frame.f_lineno})".encode(errors="replace"))
                _site_ids[key] = site
            return site
        frame = frame.f_back
    return 0


def _wrap_with_site(fn, which):
    """fn, with the call site of its caller set in the library while it runs."""

    def with_site(*args, **kwargs):
        set_site = _set_site
        if set_site is None:
            return fn(*args, **kwargs)
        site = _site(sys._getframe(1))
        if not site:
            return fn(*args, **kwargs)
        before = set_site(which, site)
        try:
            return fn(*args, **kwargs)
        finally:
            set_site(which, before)

    functools.update_wrapper(with_site, fn)
    with_site._xtimer_wrapped = fn
    return with_site


def _patch_c10d(module):
    for name in _COLLECTIVES:
        fn = getattr(module, name, None)
        if callable(fn) and not hasattr(fn, "_xtimer_wrapped"):
            setattr(module, name, _wrap_with_site(fn, _THREAD_SITE))


def _patch_distributed(module):
    # DDP's broadcast of its buffers before each forward (and of its parameters at start-up),
    # a binding called through the package's attribute.
    fn = getattr(module, "_broadcast_coalesced", None)
    if callable(fn) and not hasattr(fn, "_xtimer_wrapped"):
        module._broadcast_coalesced = _wrap_with_site(fn, _THREAD_SITE)


def _patch_autograd(module):
    fn = getattr(module, "backward", None)
    if callable(fn) and not hasattr(fn, "_xtimer_wrapped"):
        module.backward = _wrap_with_site(fn, _BACKWARD_SITE)


class _ModuleFinder:
    """Waits for the modules in `patches`, patches each right after it runs, and steps aside once
    all have been seen (torch is never imported by us)."""

    def __init__(self, patches):
        self.patches = dict(patches)

    def find_spec(self, name, path=None, target=None):
        patch = self.patches.pop(name, None)
        if patch is None:
            return None  # also for the find_spec below: `name` is no longer ours
        if not self.patches:
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
            patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def _off_in_child():
    global _span, _set_site
    _span = _set_site = None
    try:
        gc.callbacks.remove(_on_gc)
    except ValueError:
        pass


def install():
    """Installs the hooks the library wants; returns whether it installed any."""
    global _span, _set_site, _site_id
    try:
        import ctypes

        lib = ctypes.CDLL(None)
        hello, span = lib.xtimer_python_hello, lib.xtimer_python_span
        set_site, site_id = lib.xtimer_python_site, lib.xtimer_python_site_id
    except (OSError, AttributeError, ImportError):
        return False  # not under libxtimer_preload.so
    hello.argtypes, hello.restype = [ctypes.c_int, ctypes.c_ulong], ctypes.c_int
    wanted = hello(_ABI, _main)
    if not wanted:
        return False  # XTIMER_DISABLE, XTIMER_PYTHON_HOOKS=0, or XTIMER_STEPS=0 and XTIMER_DESYNC=0
    patches = {}
    if wanted & _WANT_SPANS:
        span.argtypes, span.restype = [ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64], None
        _span = span
        gc.callbacks.append(_on_gc)
        patches[_DATALOADER] = _patch_dataloader
    if wanted & _WANT_SITES:
        set_site.argtypes, set_site.restype = [ctypes.c_int, ctypes.c_uint], ctypes.c_uint
        site_id.argtypes, site_id.restype = [ctypes.c_char_p], ctypes.c_uint
        _set_site, _site_id = set_site, site_id
        patches[_C10D] = _patch_c10d
        patches[_DISTRIBUTED] = _patch_distributed
        patches[_AUTOGRAD] = _patch_autograd
    waiting = {}
    for name, patch in patches.items():
        if name in sys.modules:
            patch(sys.modules[name])
        else:
            waiting[name] = patch
    if waiting:
        sys.meta_path.insert(0, _ModuleFinder(waiting))
    os.register_at_fork(after_in_child=_off_in_child)
    return True
