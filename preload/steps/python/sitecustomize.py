"""xtimer's entry into a rank's Python: xtimer_launch and xtimer_run put this folder first on
PYTHONPATH (XTIMER_PYTHON_HOOKS=1), so Python's `site` imports this file at start-up. It first runs
the sitecustomize it shadows (Debian's, a virtual environment's, the user's), then installs
xtimer_pyhooks (GC pauses and DataLoader waits for the step records). Nothing here may stop the
program: a failure is one line on stderr, as Python's own `site` does for a broken sitecustomize.
"""
import os
import sys


def _run_shadowed():
    try:  # the import system's own modules, loaded already: importing importlib.util costs ms
        from _frozen_importlib import module_from_spec
        from _frozen_importlib_external import PathFinder
    except ImportError:
        from importlib.machinery import PathFinder
        from importlib.util import module_from_spec
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    spec.loader.exec_module(module)


try:
    _run_shadowed()
except Exception as e:  # noqa: BLE001 - the program must start whatever the other file does
    sys.stderr.write(f"Error in sitecustomize (run by xtimer's): {type(e).__name__}: {e}\n")

try:
    import xtimer_pyhooks

    xtimer_pyhooks.install()
except Exception as e:  # noqa: BLE001
    sys.stderr.write(f"xtimer: Python hooks not installed: {type(e).__name__}: {e}\n")
