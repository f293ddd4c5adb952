"""Exclusive locks that die with their holder: one writer per stage and batch, whoever runs it.

Two runs of the same batch (two `fm run`, a sensor run racing a backfill, the UI) must not
process it twice; a crashed run must not keep anyone else out. So the lock is held by the
process itself, never written as a row that someone has to clean up:

- embedded profile (SQLite catalog): `flock` on a file under FM_HOME; the kernel drops it when
  the process dies, however it dies;
- production (Postgres catalog): a session-level advisory lock on a connection of its own;
  Postgres drops it when the connection closes, including when the process is killed.

A waiter says who holds the lock and since when, then waits.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import sqlalchemy as sa

from fm_assets.settings import Settings

Log = Callable[[str], None]


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


@contextlib.contextmanager
def exclusive(settings: Settings, name: str, log: Log = lambda message: None) -> Iterator[None]:
    """Hold the platform-wide lock `name` for the block; wait (saying for whom) while held."""
    if settings.catalog_uri.startswith("postgresql"):
        with _advisory_lock(settings, name, log):
            yield
    else:
        with _file_lock(settings.home / "locks", name, log):
            yield


@contextlib.contextmanager
def try_exclusive(settings: Settings, name: str) -> Iterator[bool]:
    """Hold the platform-wide lock `name` for the block if no one else holds it; yields whether
    it is held (a caller that can do its work later, such as catalog maintenance, skips it)."""
    if settings.catalog_uri.startswith("postgresql"):
        with _advisory_lock(settings, name, lambda message: None, wait=False) as got:
            yield got
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


@contextlib.contextmanager
def _advisory_lock(settings: Settings, name: str, log: Log, wait: bool = True) -> Iterator[bool]:
    from fm_assets.storage.catalog import open_catalog

    engine: sa.engine.Engine = open_catalog(settings).engine  # type: ignore[attr-defined]
    key = _key(name)
    holder = _holder()
    # Postgres shows a session's application_name to others (at most 63 bytes): the holder.
    label = f"pid {holder['pid']} on {holder['host']}"[:40] + f" since {holder['since']}"[:23]
    # autocommit: the advisory lock belongs to the session, not to a transaction.
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(
            sa.text("SELECT set_config('application_name', :h, false)"), {"h": label}
        )
        got = connection.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()
        if not got:
            if not wait:
                yield False
                return
            log(f"{name}: held by {_advisory_holder(connection, key)}; waiting for it")
            connection.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": key})
        try:
            yield True
        finally:
            connection.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": key})


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
