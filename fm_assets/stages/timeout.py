"""Run a call under a wall-clock budget, so one pathological document cannot stall a batch."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class CallTimeout(Exception):
    """The call ran past its budget."""


def call_with_timeout(fn: Callable[[], T], seconds: float) -> T:
    """Return fn(), or raise CallTimeout after `seconds`.

    On the main thread (Ray runs task code there) a SIGALRM timer interrupts the call at its
    next Python bytecode. Elsewhere the call runs unbounded: a thread cannot be interrupted.
    """
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        return fn()

    def _expire(signum: int, frame: object) -> None:
        raise CallTimeout(f"exceeded {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, _expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
