"""Exclusive locks that die with their holder: one writer per stage and batch, whoever runs it.

Two runs of the same batch (two `fm run`, a sensor run racing a backfill, the UI) must not
process it twice; a crashed run must not keep anyone else out. So the lock is held by the
process itself, never written as a row that someone has to clean up:

- embedded profile (SQLite catalog): `flock` on a file under FM_HOME; the kernel drops it when
  the process dies, however it dies;
- production (Postgres catalog): a session-level advisory lock on a connection of its own;
  Postgres drops it when the connection closes, including when the process is killed.

A waiter says who holds the lock and since when, then waits. A Postgres lock can also be lost
while its holder lives: the connection drops (a restarted or failed-over server, a network cut,
`pg_terminate_backend`) and another run may take it. So the holder watches it: a heartbeat on
the lock's connection (TCP keepalives underneath) notices, and `HeldLock.check` raises
`LockLost`, which the runner calls between Ray results and before every commit: a run that lost
its lock stops instead of going on unlocked.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import sqlalchemy as sa

from fm_assets.settings import Settings

Log = Callable[[str], None]

HEARTBEAT_S = 5.0  # how often a holder makes sure its Postgres lock is still its own
# libpq settings of a lock's connection: a peer gone silent is noticed within ~30 s, not the
# kernel's two hours, and a send it never acknowledges fails within 30 s.
_KEEPALIVE = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
    "connect_timeout": 10,
}


class LockLost(RuntimeError):
    """A lock's holder lost it while working (its Postgres connection dropped)."""


class HeldLock:
    """A lock this process holds. `check()` raises `LockLost` once it is no longer held;
    `check(now=True)` asks the server first instead of trusting the last heartbeat."""

    def __init__(self, name: str) -> None:
        self.name = name

    def check(self, now: bool = False) -> None:
        """A file lock is held until its holder releases it or dies: nothing to check."""


def _holder() -> dict[str, object]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def _describe(holder: dict[str, object] | None) -> str:
    if not holder:
        return "another process"
    return f"pid {holder.get('pid')} on {holder.get('host')} since {holder.get('since')}"


def stage_lock(stage: str, batch_id: str) -> str:
    """The lock a run of `stage` for `batch_id` holds, whoever runs it."""
    return f"stage {stage} of batch {batch_id}"


def index_lock(what: str, namespace: str) -> str:
    """The lock a stage deciding against data namespace `namespace`'s index holds while it reads
    and commits (`what`: exact dedup, near dedup, image dedup)."""
    return f"{what} ({namespace} index)"


def check_all(held: Sequence[HeldLock], *, now: bool = False) -> None:
    """`check` each lock: `LockLost` for the first one no longer held."""
    for lock in held:
        lock.check(now=now)


@contextlib.contextmanager
def exclusive(settings: Settings, name: str, log: Log = lambda message: None) -> Iterator[HeldLock]:
    """Hold the platform-wide lock `name` for the block; wait (saying for whom) while held.
    Work that must not go on without the lock calls `check()` on what this yields."""
    if settings.catalog_uri.startswith("postgresql"):
        with _advisory_lock(settings, name, log) as held:
            if held is None:  # only when not waiting
                raise RuntimeError(f"the lock {name!r} was not taken")
            yield held
    else:
        with _file_lock(settings.home / "locks", name, log):
            yield HeldLock(name)


@contextlib.contextmanager
def try_exclusive(settings: Settings, name: str) -> Iterator[bool]:
    """Hold the platform-wide lock `name` for the block if no one else holds it; yields whether
    it is held (a caller that can do its work later, such as catalog maintenance, skips it)."""
    if settings.catalog_uri.startswith("postgresql"):
        with _advisory_lock(settings, name, lambda message: None, wait=False) as held:
            yield held is not None
    else:
        with _file_lock(settings.home / "locks", name, lambda message: None, wait=False) as got:
            yield got


@contextlib.contextmanager
def _file_lock(directory: Path, name: str, log: Log, wait: bool = True) -> Iterator[bool]:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{hashlib.sha256(name.encode()).hexdigest()[:24]}.lock"
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                yield False
                return
            handle.seek(0)
            try:
                holder = json.loads(handle.read() or "null")
            except ValueError:
                holder = None
            log(f"{name}: held by {_describe(holder)}; waiting for it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"lock": name, **_holder()}))
        handle.flush()
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _key(name: str) -> int:
    """A signed 64-bit advisory lock key for `name`."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class _AdvisoryLock(HeldLock):
    """A session-level advisory lock held on `connection`, watched by a heartbeat thread."""

    def __init__(self, name: str, key: int, connection: sa.engine.Connection) -> None:
        super().__init__(name)
        self._key = key
        self._connection = connection
        self._using = threading.Lock()  # one statement at a time on the connection
        self._backend = connection.execute(sa.text("SELECT pg_backend_pid()")).scalar()
        self.lost: str | None = None  # why, once lost
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, daemon=True, name="fm-lock-beat")

    def start(self) -> None:
        self._beat.start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S) and self.lost is None:
            self._ask()

    def _ask(self) -> None:
        """Ask the server whether this session still holds the lock; record why not."""
        with self._using:
            if self.lost is not None:
                return
            try:
                held = self._connection.execute(
                    sa.text(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                        "AND pid = pg_backend_pid() "
                        "AND ((classid::bigint << 32) | objid::bigint) = :k"
                    ),
                    {"k": self._key},
                ).scalar()
                why = None if held else "its Postgres session no longer holds it"
            except sa.exc.SQLAlchemyError as exc:
                # On one line: what the server said, then what the driver saw.
                said = "; ".join(
                    line.strip()
                    for line in str(getattr(exc, "orig", None) or exc).splitlines()
                    if line.strip()
                )
                why = f"its Postgres connection dropped ({said or type(exc).__name__})"
            if why is not None:
                self.lost = f"{why} at {dt.datetime.now(dt.UTC):%H:%M:%S} UTC"

    def check(self, now: bool = False) -> None:
        if now:
            self._ask()
        if self.lost is not None:
            raise LockLost(
                f"lost the lock {self.name!r} (Postgres backend pid {self._backend}): "
                f"{self.lost}. Another run may hold it now, so this one stopped instead of going "
                "on unlocked. Running it again is safe: a stage is recorded as done only after "
                "its last commit, and a rerun replaces whatever this run committed"
            )

    def release(self) -> None:
        self._stop.set()
        if self._beat.is_alive():
            self._beat.join()
        # A lock whose connection is gone is released already: its session ended with it.
        with self._using, contextlib.suppress(sa.exc.SQLAlchemyError):
            if self.lost is None:
                self._connection.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": self._key})


@contextlib.contextmanager
def _advisory_lock(
    settings: Settings, name: str, log: Log, wait: bool = True
) -> Iterator[HeldLock | None]:
    # A connection of its own, out of any pool: Postgres holds the lock as long as this session
    # lives, so it must never serve anything else, and it must notice a dead peer soon.
    engine = sa.create_engine(
        settings.catalog_uri, poolclass=sa.pool.NullPool, connect_args=_KEEPALIVE
    )
    key = _key(name)
    holder = _holder()
    # Postgres shows a session's application_name to others (at most 63 bytes): the holder.
    label = f"pid {holder['pid']} on {holder['host']}"[:40] + f" since {holder['since']}"[:23]
    try:
        # autocommit: the advisory lock belongs to the session, not to a transaction.
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(
                sa.text("SELECT set_config('application_name', :h, false)"), {"h": label}
            )
            got = connection.execute(
                sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": key}
            ).scalar()
            if not got:
                if not wait:
                    yield None
                    return
                log(f"{name}: held by {_advisory_holder(connection, key)}; waiting for it")
                connection.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": key})
            held = _AdvisoryLock(name, key, connection)
            held.start()
            try:
                yield held
            finally:
                held.release()
    finally:
        engine.dispose()


def _advisory_holder(connection: sa.engine.Connection, key: int) -> str:
    row = connection.execute(
        sa.text(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted "
            "AND ((l.classid::bigint << 32) | l.objid::bigint) = :k"
        ),
        {"k": key},
    ).first()
    return str(row[0]) if row is not None and row[0] else "another process"
