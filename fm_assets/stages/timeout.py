"""Run a call under a wall-clock budget, so one pathological document cannot stall a batch.

The budget holds on every thread: on the main thread (where Ray runs task code) a SIGALRM
timer interrupts the call; on any other thread (a thread pool, Ray's threaded actors) a watchdog
timer raises `CallTimeout` in the calling thread through CPython's `PyThreadState_SetAsyncExc`.
Either way the call is interrupted at its next Python bytecode: a single C call that never
returns to Python (one enormous lxml parse) runs on until it does.
"""

from __future__ import annotations

import ctypes
import signal
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class CallTimeout(Exception):
    """The call ran past its budget."""


def call_with_timeout(fn: Callable[[], T], seconds: float) -> T:
    """Return fn(), or raise CallTimeout after `seconds` (no budget when `seconds` <= 0)."""
    if seconds <= 0:
        return fn()
    if threading.current_thread() is threading.main_thread():
        return _with_alarm(fn, seconds)
    return _with_watchdog(fn, seconds)


def _with_alarm(fn: Callable[[], T], seconds: float) -> T:
    def _expire(signum: int, frame: object) -> None:
        raise CallTimeout(f"exceeded {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, _expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class _Watchdog:
    """Raises CallTimeout in one thread when its timer fires before `finish`."""

    def __init__(self, seconds: float) -> None:
        self._thread_id = ctypes.c_ulong(threading.get_ident())
        self._lock = threading.Lock()
        self._finished = False
        self.fired = False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def start(self) -> None:
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._finished:
                return
            self.fired = True
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                self._thread_id, ctypes.py_object(CallTimeout)
            )

    def finish(self) -> None:
        """Stop the timer; withdraw an exception it raised that has not been delivered yet."""
        self._timer.cancel()
        with self._lock:
            self._finished = True
            if self.fired:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(self._thread_id, None)


def _with_watchdog(fn: Callable[[], T], seconds: float) -> T:
    watchdog = _Watchdog(seconds)
    try:
        watchdog.start()
        try:
            return fn()
        finally:
            watchdog.finish()
    except CallTimeout as exc:
        # Raised from the watchdog's bare class: give it the message the alarm gives.
        raise CallTimeout(f"exceeded {seconds:g} s") from exc
