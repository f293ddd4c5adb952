"""Keeping the garbage collector off a process's long-lived objects.

CPython's oldest-generation collection walks every tracked object. An `fm` command holds
Dagster, pyiceberg, Ray and the platform's definitions, and a warm worker the stages and
great_expectations: hundreds of thousands of objects that live as long as the process. Measured
in one `fm run` of a 20-document batch, the driver made 7 full collections of 15 to 169 ms
(0.6 s together, 7% of the command), a warm worker several of 160-200 ms, wherever in a stage
they fell. `gc.freeze()` moves what exists into a generation the collector never visits; cycles
made later are still collected, and anything frozen is still freed when its last reference
goes; only a cycle already frozen is never reclaimed. So each kind of long-lived state freezes
once per process, right after it is built (a process that builds definitions for every call,
the test suite, leaks nothing more by calling again).
"""

from __future__ import annotations

import gc

_frozen: set[str] = set()


def freeze_long_lived(what: str) -> None:
    """Exclude every object alive now from later collections, the first time `what` (the
    long-lived state just built: "definitions", "ray", "worker") is frozen in this process."""
    if what in _frozen:
        return
    _frozen.add(what)
    gc.freeze()
