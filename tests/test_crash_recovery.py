"""A crash never wedges the platform, and a rerun after it converges to the uninterrupted result.

`fm run` is killed with SIGKILL (its whole process group) in the middle of a stage, twice, at
different stages; the dead runs stay STARTED in Dagster's run storage holding `ray` pool slots.
The next `fm run` (or, with the daemon running, its sensor first) must notice, fail them, free
their slots, finish the batch, and leave every stage's table exactly as a run that was never
interrupted leaves it. A run waiting for slots a live run holds says which run and since when,
and goes on once that run dies.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from fm_assets.commands import operations
from fm_assets.execution import pipeline
from fm_assets.registries.tokenizers import register_tokenizer
from fm_assets.settings import Settings, load_settings
from fm_assets.storage import catalog
from tests.paths import NEOX_TOKENIZER, REPO, WGET_WARC
from tests.policies import opt_out_policy
from tests.services.fixtures import start_fm_dev, stop_fm_dev

if TYPE_CHECKING:
    import dagster as dg

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


class FmRun:
    """`fm run --batch ID` in its own process group, its progress lines collected as they come."""

    def __init__(self, home: Path, batch_id: str) -> None:
        self.process = subprocess.Popen(
            [str(FM), "run", "--batch", batch_id],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=_env(home),
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._new_line = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._new_line:
                self.lines.append(line.rstrip())
                self._new_line.notify_all()
        with self._new_line:
            self._new_line.notify_all()

    def wait_for_line(self, matches: Callable[[str], bool], what: str) -> str:
        """The first line printed that `matches`; fails the test if the run ends without one."""
        deadline = time.monotonic() + RUN_TIMEOUT_S
        with self._new_line:
            while True:
                found = next((line for line in self.lines if matches(line)), None)
                if found is not None:
                    return found
                ended = not self._reader.is_alive()
                if ended or time.monotonic() > deadline:
                    self.kill()
                    pytest.fail(f"fm run never printed {what}: {self.lines[-20:]}")
                self._new_line.wait(timeout=5)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self._reader.join(timeout=10)

    def wait(self) -> int:
        try:
            returncode = self.process.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"fm run did not finish (wedged?): {self.lines[-20:]}")
        self._reader.join(timeout=10)
        return returncode


def _kill_when(home: Path, batch_id: str, marker: str, delay_s: float) -> list[str]:
    """Start `fm run`, SIGKILL its process group `delay_s` after a progress line containing
    `marker`; return what it printed."""
    run = FmRun(home, batch_id)
    run.wait_for_line(lambda line: marker in line, repr(marker))
    time.sleep(delay_s)
    if run.process.poll() is not None:
        pytest.fail(f"fm run ended before it could be killed: {run.lines[-20:]}")
    run.kill()
    return run.lines


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


def _status(instance: dg.DagsterInstance, run_id: str) -> dg.DagsterRunStatus | None:
    run = instance.get_run_by_id(run_id)
    return None if run is None else run.status


def _failure_message(instance: dg.DagsterInstance, run_id: str) -> str:
    """What the run's RUN_FAILURE event says (the run's page in the UI shows it)."""
    import dagster as dg

    (failure,) = instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    return failure.message


def _slot_holders(instance: dg.DagsterInstance) -> set[str]:
    """The runs holding a claimed slot of any pool."""
    storage = instance.event_log_storage
    return {
        slot.run_id
        for pool in storage.get_concurrency_keys()
        for slot in storage.get_concurrency_info(pool).claimed_slots
    }


def test_with_the_daemon_running_a_rerun_after_two_kills_also_converges(
    crashed_twice: tuple[Settings, str, Path], uninterrupted: Tables
) -> None:
    """The daemon's sensor fails the dead run and frees its slots before any command of ours
    runs again; it may also launch its own run of the batch beside our rerun, and the stage lock
    keeps them from processing it twice."""
    import dagster as dg

    from fm_assets.defs.materialize import dagster_instance
    from fm_assets.storage.bookkeeping import stage_runs

    settings, batch_id, home = crashed_twice
    instance = dagster_instance(settings)
    killed = instance.get_runs()
    left_started = [r.run_id for r in killed if r.status == dg.DagsterRunStatus.STARTED]
    assert len(left_started) == 1 and left_started[0] in _slot_holders(instance)
    dev, _ = start_fm_dev(_env(home), home.parent / "fm-dev.log")
    try:
        # No fm command runs until the daemon's sensor has ticked and failed the dead run.
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while _status(instance, left_started[0]) != dg.DagsterRunStatus.FAILURE:
            assert time.monotonic() < deadline, "the daemon never failed the dead run"
            time.sleep(2)
        assert "new_landing_batch_sensor (the daemon)" in _failure_message(
            instance, left_started[0]
        )
        assert not {r.run_id for r in killed} & _slot_holders(instance), (
            "a dead run still holds pool slots after the daemon's tick"
        )
        result = _fm_run(home, batch_id)
        assert result.returncode == 0, result.stderr[-3000:]
        # The daemon left the rerun nothing to reap.
        assert "died with its process" not in result.stderr, result.stderr[-3000:]
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
    assert [p.returncode for p in with_two] == [0, 0], "\n\n".join(o[-4000:] for o in outputs)
    committed = [(r["batch_id"], r["stage"]) for r in stage_runs(settings)]
    assert sorted(committed) == sorted((batch_id, s) for s in pipeline.STAGE_NAMES), (
        "a stage of the batch was committed twice"
    )


def test_a_run_waiting_for_slots_says_who_holds_them_and_goes_on_when_the_holder_dies(
    ray_address: str, tmp_path: Path, uninterrupted: Tables
) -> None:
    """A live run (tests/slot_holder.py: a real Dagster run of a real process) holds both slots
    of the `ray` pool; `fm run` waits, names the holding run and since when; the holder is then
    killed, and the waiting run fails it, takes its slots and finishes the batch."""
    import dagster as dg

    from fm_assets.defs.materialize import dagster_instance

    home = tmp_path / "fm"
    settings, batch_id = _prepare(home)
    with (tmp_path / "slot-holder.log").open("w") as holder_log:
        holder = subprocess.Popen(
            [sys.executable, "-m", "tests.slot_holder"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=holder_log,
            text=True,
            cwd=REPO,
            env=_env(home),
            start_new_session=True,
        )
    waiting: FmRun | None = None
    try:
        assert holder.stdout is not None
        announced = holder.stdout.readline()  # "holding RUN_ID" once both slots are claimed
        assert announced.startswith("holding "), (tmp_path / "slot-holder.log").read_text()
        holder_id = announced.split()[1]
        instance = dagster_instance(settings)
        record = instance.get_run_record_by_id(holder_id)
        assert record is not None and record.start_time is not None
        since = dt.datetime.fromtimestamp(record.start_time).strftime("%H:%M:%S")

        waiting = FmRun(home, batch_id)
        line = waiting.wait_for_line(
            lambda text: "waiting for a slot of pool 'ray'" in text, "that it waits for a slot"
        )
        assert f"held by run {holder_id[:8]} (hold_ray_slots, pid {holder.pid} on " in line
        assert line.endswith(f"since {since}"), line
        assert _status(instance, holder_id) == dg.DagsterRunStatus.STARTED
    except BaseException:
        if waiting is not None:
            waiting.kill()
        raise
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # the holder dies holding both slots
        holder.wait(timeout=30)

    assert waiting.wait() == 0, waiting.lines[-20:]
    assert any(
        f"run {holder_id[:8]} (hold_ray_slots) died with its process" in text
        for text in waiting.lines
    ), waiting.lines[-20:]
    assert "an fm command waiting for its slots" in _failure_message(instance, holder_id)
    assert _tables(settings, batch_id) == uninterrupted
