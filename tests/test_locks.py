"""The stage lock: one holder at a time, a waiter names the holder, a killed holder frees it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fm_assets.settings import Settings, load_settings
from fm_assets.storage.locks import exclusive
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
