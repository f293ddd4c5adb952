"""Batches built in the trainer's own process (`make_loader(num_workers=0)`), ahead when that pays.

Handing every batch over from a background thread cost the trainer a thread switch and a
contest for the GIL per batch: a trainer that only takes batches got half the rate of building
them in its own thread. So the trainer's thread builds the next batch itself when it asks and
none is ready. A background thread builds ahead only while the trainer's thread is idle between
batches (waiting on its accelerator, on I/O, asleep), the time in which a prefetch hides a
build: the wall time from handing a batch over to the next request, less the CPU time the
trainer's thread spent in it (read only after a step long enough to matter: a loop that only
takes batches pays two clock reads per batch). Once the median idle time of the recent steps
covers a good share of a build (`AHEAD_SHARE`), each hand-over wakes the thread to fill up to
`depth` batches; when it no longer does, the thread waits and the trainer builds again.

Batches come out in stream order whoever builds them: one lock guards the stream, and batches
built ahead wait in a FIFO the trainer empties (without that lock: a build may be stuck in a
slow fetch) before it builds one itself. A batch the thread is building when the trainer finds
nothing ready is waited for (the wait shows as stall, as any other).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

# Build ahead once the trainer's idle time per step is at least this share of a build: below
# it, the thread's wake-ups and GIL hand-offs cost more than the little build time they hide.
AHEAD_SHARE = 0.5
MIN_IDLE_S = 100e-6  # shorter gaps cannot be used by another thread: a wake-up costs as much
HISTORY = 8  # steps the idle and build times are judged over (medians: one hiccup is ignored)
_JOIN_S = 30.0
_END = object()


class Prefetcher:
    """One epoch of a rank's batches (whatever `batches` yields), built by the trainer's thread
    or ahead by a background one; `next()` and `handed_over()` are called from the trainer's
    thread only."""

    def __init__(self, batches: Iterator[Any], depth: int) -> None:
        self._batches = batches  # advanced only under `_lock`
        self._depth = depth
        self._lock = threading.Lock()
        self._ready: deque[Any] = deque()  # built ahead, in order: batches, _END, an exception
        self._ended = False  # the stream gave its last batch, or raised
        self._wake = threading.Condition()
        self._left_at: float | None = None  # when the trainer took its last batch
        self._left_cpu: float | None = None  # its thread's CPU time then (if it was measured)
        self._watch_cpu = True  # measure CPU time away: the last step was long enough to matter
        self._idle: deque[float] = deque(maxlen=HISTORY)
        self._build_s: deque[float] = deque(maxlen=HISTORY)
        self._ahead = False  # building ahead pays: the trainer idles between batches
        self._stopped = False
        self._thread: threading.Thread | None = None

    def __len__(self) -> int:
        """Batches built ahead, ready now."""
        return len(self._ready)

    def next(self, now: float) -> Any:
        """The next batch, None after the last; raises what building it raised. `now`: the
        trainer's `time.perf_counter()` as it asked."""
        left = self._left_at
        if left is not None:
            away = now - left
            if away < MIN_IDLE_S and not self._ahead:  # a loop that only takes batches
                self._left_at, self._watch_cpu = None, False
                self._idle.append(away)
            else:
                self._back(away)
        ready = self._ready
        # Only the trainer takes from `ready`: not empty now, it is not empty when taken. A
        # batch built ahead is taken without the stream's lock: a build of a later batch may
        # be stuck in a slow fetch.
        item = ready.popleft() if ready else self._take_or_build()
        if item is _END:
            return None
        if isinstance(item, BaseException):
            raise item
        return item

    def handed_over(self, now: float) -> None:
        """The trainer has its batch (at `now`) and goes back to its step: build ahead if that
        pays."""
        self._left_at = now
        self._left_cpu = time.thread_time() if self._watch_cpu else None
        if self._ahead and not self._ended and len(self._ready) < self._depth:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="fm_loader-prefetch", daemon=True
                )
                self._thread.start()
            with self._wake:
                self._wake.notify()

    def _back(self, away: float) -> None:
        """The trainer is back after `away` seconds: note how long its thread idled."""
        self._left_at = None  # nothing more is started ahead
        if away < MIN_IDLE_S:  # too short to use, whatever the thread did
            self._watch_cpu = False
            self._idle.append(away)
            if self._ahead:
                self._decide()
            return  # a short step cannot turn building ahead on: the median cannot rise
        self._watch_cpu = True
        if self._left_cpu is not None:  # else unknown: the step before was short
            self._idle.append(away - (time.thread_time() - self._left_cpu))
            self._decide()

    def _decide(self) -> None:
        idle = sorted(self._idle)[len(self._idle) // 2]
        build = sorted(self._build_s)[len(self._build_s) // 2] if self._build_s else 0.0
        self._ahead = idle >= MIN_IDLE_S and idle >= AHEAD_SHARE * build

    def _take_or_build(self) -> Any:
        """The next batch once the build in progress (if any) is done: it comes first."""
        if self._thread is None:  # nobody else builds: no lock to take
            return self._build(in_background=False)
        with self._lock:  # the thread appends only while holding it
            return self._ready.popleft() if self._ready else self._build(in_background=False)

    def _wanted(self) -> bool:
        return (
            self._left_at is not None
            and self._ahead
            and not self._ended
            and len(self._ready) < self._depth
        )

    def close(self) -> None:
        """Stop the background thread (after the build it is in, if any)."""
        with self._wake:
            self._stopped = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout=_JOIN_S)

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
        timed = self._watch_cpu or in_background  # a build's time matters once steps are long
        started = time.perf_counter() if timed else 0.0
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
        if timed:
            self._build_s.append(time.perf_counter() - started)
        return item
