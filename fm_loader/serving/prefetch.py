"""Batches built in the trainer's own process (`make_loader(num_workers=0)`), ahead when that pays.

Handing every batch over from a background thread cost the trainer a thread switch and a
contest for the GIL per batch: a trainer that only takes batches got half the rate of building
them in its own thread. So the trainer's thread builds the next batch itself when it asks and
none is ready. A background thread builds ahead only while the trainer's thread is idle between
batches (waiting on its accelerator, on I/O, asleep), the time in which a prefetch hides a
build: the wall time from handing a batch over to the next request, less the CPU time the
trainer's thread spent in it. Once the recent steps' idle time covers a good share of a build
(`AHEAD_SHARE`), each hand-over wakes the thread to fill up to `depth` batches; when it no
longer does, the thread stops and the trainer builds again.

Batches come out in stream order whoever builds them: one lock guards the stream, and batches
built ahead wait in a FIFO the trainer empties (without that lock: a build may be stuck in a
slow fetch) before it builds one itself. A batch the thread is building when the trainer finds
nothing ready is waited for (the wait shows as stall, as any other).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

Batch = dict[str, Any]
# Build ahead once the trainer's idle time per step is at least this share of a build: below
# it, the thread's wake-ups and GIL hand-offs cost more than the little build time they hide.
AHEAD_SHARE = 0.5
MIN_IDLE_S = 100e-6  # shorter gaps cannot be used by another thread: a wake-up costs as much
HISTORY = 8  # steps the idle and build times are judged over (medians: one hiccup is ignored)
_JOIN_S = 30.0
_END = object()


class Prefetcher:
    """One epoch of a rank's batches, built by the trainer's thread or ahead by a background
    one; `next()` and `handed_over()` are called from the trainer's thread only."""

    def __init__(self, batches: Iterator[Batch], depth: int) -> None:
        self._batches = batches  # advanced only under `_lock`
        self._depth = depth
        self._lock = threading.Lock()
        self._ready: deque[Any] = deque()  # built ahead, in order: batches, _END, an exception
        self._ended = False  # the stream gave its last batch, or raised
        self._wake = threading.Condition()
        self._away_since: tuple[float, float] | None = None  # (wall, thread CPU) at hand-over
        self._idle: deque[float] = deque(maxlen=HISTORY)
        self._build_s: deque[float] = deque(maxlen=HISTORY)
        self._ahead = False  # building ahead pays: the trainer idles between batches
        self._stopped = False
        self._thread: threading.Thread | None = None

    @property
    def depth(self) -> int:
        """Batches built ahead, ready now."""
        return len(self._ready)

    @property
    def building_ahead(self) -> bool:
        return self._ahead

    def next(self) -> Batch | None:
        """The next batch, None after the last; raises what building it raised."""
        if self._away_since is not None:
            wall, cpu = self._away_since
            away = time.perf_counter() - wall
            self._idle.append(max(0.0, away - (time.thread_time() - cpu)))
            idle = statistics.median(self._idle)
            self._ahead = idle >= MIN_IDLE_S and idle >= AHEAD_SHARE * statistics.median(
                self._build_s or [0.0]
            )
            self._away_since = None  # the trainer is back: nothing more is started ahead
        item = self._take()
        if isinstance(item, BaseException):
            raise item
        return None if item is _END else item

    def _take(self) -> Any:
        """A batch built ahead (without waiting for a build in progress: the thread may be stuck
        in a slow fetch), else the next one, built here once the build in progress is done."""
        while True:
            try:
                return self._ready.popleft()
            except IndexError:
                pass
            with self._lock:  # the thread appends only while holding it: it comes first
                if not self._ready:
                    return self._build(in_background=False)

    def handed_over(self) -> None:
        """The trainer has its batch and goes back to its step: build ahead if that pays."""
        self._away_since = (time.perf_counter(), time.thread_time())
        if self._ahead and not self._ended and len(self._ready) < self._depth:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="fm_loader-prefetch", daemon=True
                )
                self._thread.start()
            with self._wake:
                self._wake.notify()

    def close(self) -> None:
        """Stop the background thread (after the build it is in, if any)."""
        with self._wake:
            self._stopped = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout=_JOIN_S)

    def _wanted(self) -> bool:
        return (
            self._away_since is not None
            and self._ahead
            and not self._ended
            and len(self._ready) < self._depth
        )

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._stopped and not self._wanted():
                    self._wake.wait()
                if self._stopped:
                    return
            with self._lock:
                if self._wanted():  # the trainer may have come back meanwhile
                    self._ready.append(self._build(in_background=True))

    def _build(self, in_background: bool) -> Any:
        """The next batch of the stream (holding `_lock`); `_END` after the last. In the
        background an exception is kept for the trainer, who raises it in its turn."""
        started = time.perf_counter()
        try:
            item: Any = next(self._batches)
        except StopIteration:
            self._ended = True
            return _END
        except BaseException as exc:
            self._ended = True
            if not in_background:
                raise
            item = exc
        self._build_s.append(time.perf_counter() - started)
        return item
