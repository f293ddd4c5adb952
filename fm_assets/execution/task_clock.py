"""The CPU time of the Ray call running in this worker process, for a slice's outcome.

Every function `compute.remote` runs is wrapped by `measured`, which notes the process's CPU
time and the wall time when the call starts; `call_seconds` reads both since then. A warm worker
or a Ray worker process runs one call at a time, so the process's CPU time over the call
(threads of pyarrow and tokenizers included) is the call's.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

_started: tuple[float, float] | None = None  # (process CPU seconds, monotonic) at call start


def measured(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function`, noting when each call starts (a plain function: what `ray.remote` takes)."""

    @functools.wraps(function)
    def call(*args: Any) -> Any:
        # Through module functions: Ray pickles this closure by value, with globals of its own,
        # while `_begin` and `_end` are pickled by reference and set this module's `_started`.
        outer = _begin()
        try:
            return function(*args)
        finally:
            _end(outer)

    return call


def _begin() -> tuple[float, float] | None:
    global _started
    outer, _started = _started, (time.process_time(), time.monotonic())
    return outer


def _end(outer: tuple[float, float] | None) -> None:
    global _started
    _started = outer


def call_seconds() -> tuple[float, float]:
    """(CPU seconds, wall seconds) of the current measured call so far; (0, 0) outside one."""
    if _started is None:
        return 0.0, 0.0
    return time.process_time() - _started[0], time.monotonic() - _started[1]
