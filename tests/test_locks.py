"""The stage lock: one holder at a time, a waiter names the holder, a killed holder frees it,
and a holder whose Postgres connection drops stops instead of going on unlocked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fm_assets.settings import Settings, load_settings
from fm_assets.storage import locks
from fm_assets.storage.locks import LockLost, exclusive
from tests.services.fixtures import create_database
from tests.services.postgres import PostgresServer

HOLD = """
import sys, time
from fm_assets.settings import load_settings
from fm_assets.storage.locks import exclusive
with exclusive(load_settings(), sys.argv[1]):
    print("held", flush=True)
    time.sleep(600)
"""


def _holder(env: dict[str, str], name: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, name], stdout=subprocess.PIPE, text=True, env=env
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


def _wait_for_it_after_killing(settings: Settings, env: dict[str, str]) -> list[str]:
    """Take the lock while a subprocess holds it; SIGKILL the holder; return what was logged."""
    name = "stage raw_documents of batch b-1"
    holder = _holder(env, name)
    said: list[str] = []

    def log(message: str) -> None:
        said.append(message)
        os.kill(holder.pid, signal.SIGKILL)  # the holder dies without releasing anything

    started = time.monotonic()
    with exclusive(settings, name, log):
        waited = time.monotonic() - started
    holder.wait(timeout=10)
    assert waited < 30
    # And free again for the next taker.
    with exclusive(settings, name):
        pass
    return said


def test_a_killed_holder_frees_the_file_lock(tmp_path: Path) -> None:
    env = {**os.environ, "FM_HOME": str(tmp_path / "fm")}
    env.pop("FM_CATALOG_URI", None)
    settings = load_settings(env)
    said = _wait_for_it_after_killing(settings, env)
    assert len(said) == 1
    assert "held by pid " in said[0] and "waiting for it" in said[0]


@pytest.mark.slow
def test_a_killed_holder_frees_the_postgres_lock(postgres: PostgresServer, tmp_path: Path) -> None:
    create_database(postgres, "fm_locks")
    url = postgres.url("fm_locks", driver="postgresql+psycopg2")
    env = {**os.environ, "FM_HOME": str(tmp_path / "fm"), "FM_CATALOG_URI": url}
    settings = load_settings(env)
    said = _wait_for_it_after_killing(settings, env)
    assert len(said) == 1 and "pid " in said[0] and "waiting for it" in said[0]


def _terminate_lock_backends(postgres: PostgresServer, database: str) -> int:
    """`pg_terminate_backend` on every session of this process holding an advisory lock (a lock's
    connection is named after its holder); how many."""
    rows = postgres.query(
        database,
        "SELECT pg_terminate_backend(a.pid) FROM pg_locks l "
        "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
        f"AND a.application_name LIKE 'pid {os.getpid()} on %'",
    )
    return sum(1 for (terminated,) in rows if terminated)


@pytest.mark.slow
def test_a_postgres_lock_whose_connection_drops_is_lost_loudly(
    postgres: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(locks, "HEARTBEAT_S", 0.2)
    create_database(postgres, "fm_lost_lock")
    url = postgres.url("fm_lost_lock", driver="postgresql+psycopg2")
    settings = load_settings({"FM_HOME": str(tmp_path / "fm"), "FM_CATALOG_URI": url})
    name = "stage raw_documents of batch b-1"
    with exclusive(settings, name) as held:
        held.check(now=True)  # held: nothing to say
        assert _terminate_lock_backends(postgres, "fm_lost_lock") == 1
        # The heartbeat notices by itself; a check then says what happened and what to do.
        deadline = time.monotonic() + 30
        while True:
            try:
                held.check()
            except LockLost as lost:
                said = str(lost)
                break
            assert time.monotonic() < deadline, "the heartbeat did not notice the lost lock"
            time.sleep(0.1)
        assert f"lost the lock {name!r}" in said
        assert "its Postgres connection dropped (server closed the connection" in said
        assert "Running it again is safe" in said
        # Gone indeed: another session takes it at once (a waiter would have been let in).
        with exclusive(settings, name, lambda message: pytest.fail(f"waited: {message}")):
            pass
    # Leaving the block of a lost lock raises nothing of its own.


DOCUMENT = '{{"id": "{f}-{d}", "text": "document {f}-{d} of the lost lock test, {words}"}}\n'


@pytest.mark.slow
def test_a_stage_that_loses_its_lock_stops_before_committing(
    ray_session: None, postgres: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fm_assets.execution.runner import run_stage
    from fm_assets.storage.bookkeeping import latest_stage_run
    from fm_assets.storage.landing import land_files
    from fm_assets.storage.objectstore import open_object_store

    monkeypatch.setattr(locks, "HEARTBEAT_S", 0.2)
    create_database(postgres, "fm_lost_stage_lock")
    url = postgres.url("fm_lost_stage_lock", driver="postgresql+psycopg2")
    settings = load_settings({"FM_HOME": str(tmp_path / "fm"), "FM_CATALOG_URI": url})
    paths = []
    for f in range(4):
        path = tmp_path / f"part-{f}.jsonl"
        words = " ".join(f"w{f}{i}" for i in range(40))
        path.write_text("".join(DOCUMENT.format(f=f, d=d, words=words) for d in range(800)))
        paths.append(path)
    manifest, _ = land_files(open_object_store(settings), paths, source="t", license="CC0-1.0")
    said: list[str] = []

    def cut_at_first_task(message: str) -> None:
        said.append(message)
        if message.startswith("scan: ") and len([m for m in said if "done" in m]) == 1:
            assert _terminate_lock_backends(postgres, "fm_lost_stage_lock") >= 1
            time.sleep(1.0)  # five heartbeats: the stage must stop at its next look

    with pytest.raises(LockLost, match="Running it again is safe"):
        run_stage(settings, "raw_documents", manifest.batch_id, progress=cut_at_first_task)
    # Stopped mid-stage, in its first round of tasks: it neither went on nor committed.
    later = [m for m in said if m.startswith(("decide:", "raw_documents: ")) and " done" in m]
    assert not later, said
    assert latest_stage_run(settings, manifest.batch_id, "raw_documents") is None
    # Running it again is safe: every record arrives, once.
    report = run_stage(settings, "raw_documents", manifest.batch_id)
    assert report.records_in == 4 * 800
    assert report.records_kept + report.records_quarantined == report.records_in
    assert report.records_kept == 4 * 800
