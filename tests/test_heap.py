"""Freezing long-lived objects: each kind once per process, and later garbage still collected."""

import gc
import weakref

from fm_assets.execution.heap import freeze_long_lived


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_each_kind_freezes_once_and_later_cycles_are_still_collected() -> None:
    freeze_long_lived("test-kind")
    frozen = gc.get_freeze_count()
    assert frozen > 0
    kept = [_Node() for _ in range(100)]  # alive now: a second freeze of the kind must skip them
    freeze_long_lived("test-kind")
    assert gc.get_freeze_count() == frozen
    first, second = _Node(), _Node()
    first.other, second.other = second, first  # a cycle, unreachable once the names go
    alive = weakref.ref(first)
    del first, second
    gc.collect()
    assert alive() is None, "a cycle made after the freeze was not collected"
    assert len(kept) == 100
