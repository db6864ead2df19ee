"""Ending the program without freeing the model object by object.

A model holds hundreds of thousands of small objects (nodes, their lists and args). When the
process ends anyway, freeing them one at a time only to give the memory back to the kernel
costs CPU (0.1 s for `stats` on benchmark 7's jittered Chakra set, 0.3–0.5 s for 2 × 105 MB of
profiler traces) and, worse, Python's last collection walks them all. So when et-convert runs
as a program (`cli.main`), the models it reads are kept here and the process ends with
`os._exit` once Python's exit handlers have run (Dask closes its cluster in one) and the
standard streams are flushed. Used as a library, nothing is kept and nothing changes.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from typing import NoReturn

_kept: list | None = None  # a list once enable() ran: what stays alive until the process ends


def enable() -> None:
    """From now on keep_until_exit() keeps; called once by the program's entry point."""
    global _kept
    if _kept is None:
        _kept = []


def keep_until_exit(model: object) -> None:
    """Let `model` live until the process ends (only when running as the program)."""
    if _kept is not None:
        _kept.append(model)


def end_process(code: int) -> NoReturn:
    """Exit with `code` as `sys.exit` would, skipping only the freeing of what is still alive.

    Falls back to `sys.exit` when a thread that Python would wait for is still running or a
    standard stream cannot be flushed (a closed pipe: Python then says so and exits as usual).
    """
    gc.disable()  # nothing left to collect: a collection now would only walk the model
    waited_for = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if not waited_for:
        atexit._run_exitfuncs()  # what Python runs at exit; os._exit would skip it
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        else:
            os._exit(code)
    if _kept is not None:
        _kept.clear()  # freed now, while the collector is still off
    sys.exit(code)
