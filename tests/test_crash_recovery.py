"""A crash never wedges the platform, and a rerun after it converges to the uninterrupted result.

`fm run` is killed with SIGKILL (its whole process group) in the middle of a stage, twice, at
different stages; the dead runs stay STARTED in Dagster's run storage holding `ray` pool slots.
The next `fm run` must notice, fail them, free their slots, finish the batch, and leave every
stage's table exactly as a run that was never interrupted leaves it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fm_assets.commands import operations
from fm_assets.execution import pipeline
from fm_assets.registries.tokenizers import register_tokenizer
from fm_assets.settings import Settings, load_settings
from fm_assets.storage import catalog
from tests.paths import NEOX_TOKENIZER, WGET_WARC
from tests.policies import opt_out_policy
from tests.services.fixtures import start_fm_dev, stop_fm_dev

pytestmark = pytest.mark.slow

FM = Path(sys.executable).with_name("fm")
NOT_FINISHED = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")
RUN_TIMEOUT_S = 420  # a wedged run (waiting for slots forever) fails here instead of hanging CI


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    env |= {"FM_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}
    # The subject is crash recovery, not curation: every page of the crawl goes through.
    return env | {"FM_POLICY_FILE": str(opt_out_policy(home.parent))}


def _prepare(home: Path) -> tuple[Settings, str]:
    settings = load_settings(_env(home))
    register_tokenizer(settings, NEOX_TOKENIZER, make_default=True)
    batch, _ = operations.land(settings, [WGET_WARC], source="wget", license="Apache-2.0")
    return settings, batch.batch_id


def _fm_run(home: Path, batch_id: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(FM), "run", "--batch", batch_id],
        capture_output=True,
        text=True,
        env=_env(home),
        timeout=RUN_TIMEOUT_S,
    )


def _kill_when(home: Path, batch_id: str, marker: str, delay_s: float) -> list[str]:
    """Start `fm run`, SIGKILL its process group `delay_s` after a progress line containing
    `marker`; return what it printed."""
    process = subprocess.Popen(
        [str(FM), "run", "--batch", batch_id],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=_env(home),
        start_new_session=True,
    )
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line.rstrip())
            if marker in line:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not seen.wait(timeout=RUN_TIMEOUT_S):
        process.kill()
        pytest.fail(f"fm run never printed {marker!r}: {lines[-20:]}")
    time.sleep(delay_s)
    if process.poll() is not None:
        pytest.fail(f"fm run ended before it could be killed: {lines[-20:]}")
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    reader.join(timeout=10)
    return lines


@dataclass(frozen=True)
class Tables:
    """Every stage's rows of a batch as sets of ids, and its quarantine."""

    stages: dict[str, list[str]]
    quarantine: list[tuple[object, ...]]


def _tables(settings: Settings, batch_id: str) -> Tables:
    stages = {
        name: sorted(
            catalog.read_batch(settings, name, batch_id, columns=("doc_id",))
            .column("doc_id")
            .to_pylist()
        )
        for name in pipeline.STAGE_NAMES
    }
    bad = catalog.read_batch(
        settings, "quarantine", batch_id, columns=("stage", "record_id", "rule")
    )
    return Tables(stages, sorted(tuple(r.values()) for r in bad.to_pylist()))


@pytest.fixture(scope="module")
def uninterrupted(ray_address: str, tmp_path_factory: pytest.TempPathFactory) -> Tables:
    home = tmp_path_factory.mktemp("uninterrupted") / "fm"
    settings, batch_id = _prepare(home)
    result = _fm_run(home, batch_id)
    assert result.returncode == 0, result.stderr[-3000:]
    tables = _tables(settings, batch_id)
    assert len(tables.stages[pipeline.STAGE_NAMES[-1]]) >= 5
    return tables


@pytest.fixture
def crashed_twice(ray_address: str, tmp_path: Path) -> Iterator[tuple[Settings, str, Path]]:
    home = tmp_path / "fm"
    settings, batch_id = _prepare(home)
    # Killed inside the first stage, then again in a later one (the first's work committed).
    _kill_when(home, batch_id, f"{pipeline.STAGE_NAMES[0]}:", 0.5)
    _kill_when(home, batch_id, f"{pipeline.STAGE_NAMES[3]}:", 0.2)
    yield settings, batch_id, home


def test_a_rerun_after_two_kills_finishes_and_matches_an_uninterrupted_run(
    crashed_twice: tuple[Settings, str, Path], uninterrupted: Tables
) -> None:
    import dagster as dg

    from fm_assets.defs.materialize import dagster_instance

    settings, batch_id, home = crashed_twice
    instance = dagster_instance(settings)
    killed = instance.get_runs()
    # The second `fm run` already failed the first's run (its process was gone) before it
    # started; the second's own run is left STARTED, holding its slot, as after a real crash.
    assert sorted(r.status.value for r in killed) == ["FAILURE", "STARTED"]

    result = _fm_run(home, batch_id)  # times out (fails) if it waits for the dead runs' slots

    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("died with its process") == 1, result.stderr[-3000:]
    assert _tables(settings, batch_id) == uninterrupted
    statuses = {r.run_id: r.status for r in instance.get_runs()}
    for run in killed:
        assert statuses[run.run_id] == dg.DagsterRunStatus.FAILURE
    for pool in instance.event_log_storage.get_concurrency_keys():
        assert instance.event_log_storage.get_concurrency_info(pool).claimed_slots == []


def test_with_the_daemon_running_a_rerun_after_two_kills_also_converges(
    crashed_twice: tuple[Settings, str, Path], uninterrupted: Tables
) -> None:
    """The daemon's sensor sees the batch too: it fails the dead run itself and may launch its
    own run of the batch beside ours; the stage lock keeps them from processing it twice."""
    import dagster as dg

    from fm_assets.defs.materialize import dagster_instance
    from fm_assets.storage.bookkeeping import stage_runs

    settings, batch_id, home = crashed_twice
    killed = dagster_instance(settings).get_runs()
    dev, _ = start_fm_dev(_env(home), home.parent / "fm-dev.log")
    try:
        result = _fm_run(home, batch_id)
        assert result.returncode == 0, result.stderr[-3000:]
        instance = dagster_instance(settings)
        deadline = time.monotonic() + RUN_TIMEOUT_S  # a sensor run of the batch may still run
        unfinished = [dg.DagsterRunStatus(status) for status in NOT_FINISHED]
        while instance.get_runs(dg.RunsFilter(statuses=unfinished)):
            assert time.monotonic() < deadline, "a run of the batch never finished"
            time.sleep(2)
    finally:
        stop_fm_dev(dev)
    assert _tables(settings, batch_id) == uninterrupted
    statuses = {r.run_id: r.status for r in instance.get_runs()}
    assert all(statuses[r.run_id] == dg.DagsterRunStatus.FAILURE for r in killed)
    committed = [(r["batch_id"], r["stage"]) for r in stage_runs(settings)]
    assert len(committed) == len(set(committed)), "a stage of the batch was committed twice"


def test_two_runs_of_one_batch_at_once_process_it_once(ray_address: str, tmp_path: Path) -> None:
    from fm_assets.storage.bookkeeping import stage_runs

    home = tmp_path / "fm"
    settings, batch_id = _prepare(home)
    with_two = [
        subprocess.Popen(
            [str(FM), "run", "--batch", batch_id],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=_env(home),
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=RUN_TIMEOUT_S)[1] for p in with_two]
    assert [p.returncode for p in with_two] == [0, 0], outputs
    committed = [(r["batch_id"], r["stage"]) for r in stage_runs(settings)]
    assert sorted(committed) == sorted((batch_id, s) for s in pipeline.STAGE_NAMES), (
        "a stage of the batch was committed twice"
    )
