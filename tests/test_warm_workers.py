"""Warm workers: `fm` commands call long-lived Ray workers instead of starting their own, get the
same results as with plain tasks, and a worker that dies mid-call has its call run again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from fm_assets.commands import operations
from fm_assets.execution import pipeline, warm_pool
from fm_assets.registries.tokenizers import register_tokenizer
from fm_assets.settings import load_settings
from fm_assets.storage import catalog
from tests.paths import NEOX_TOKENIZER, WGET_WARC, WGET_WARC_2
from tests.policies import opt_out_policy

pytestmark = pytest.mark.slow

FM = Path(sys.executable).with_name("fm")


def _env(home: Path, warm_workers: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    return env | {
        "FM_HOME": str(home),
        "DAGSTER_HOME": str(home / "dagster"),
        "FM_WARM_WORKERS": warm_workers,
        "FM_POLICY_FILE": str(opt_out_policy(home.parent)),
    }


def _run_batches(home: Path, warm_workers: str, files: list[Path]) -> list[str]:
    """Land each file as a batch and `fm run` it, each command a new process; the batch ids."""
    settings = load_settings(_env(home, warm_workers))
    register_tokenizer(settings, NEOX_TOKENIZER, make_default=True)
    batches = []
    for path in files:
        batch, _ = operations.land(settings, [path], source="wget", license="Apache-2.0")
        done = subprocess.run(
            [str(FM), "run", "--batch", batch.batch_id],
            capture_output=True,
            text=True,
            env=_env(home, warm_workers),
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "all stages and checks passed" in done.stderr
        batches.append(batch.batch_id)
    return batches


def _pool_pids() -> dict[str, int]:
    """The warm workers on the session's Ray: name -> process id."""
    import ray

    found = {}
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] == warm_pool.NAMESPACE:
            actor = ray.get_actor(entry["name"], namespace=warm_pool.NAMESPACE)
            found[entry["name"]] = ray.get(actor.pid.remote(), timeout=60)
    return found


def _stage_rows(home: Path, warm_workers: str, batch_id: str) -> dict[str, pa.Table]:
    settings = load_settings(_env(home, warm_workers))
    rows = {}
    for entry in pipeline.CURATION_STAGES:
        table = catalog.read_batch(settings, entry.name, batch_id)
        keep = [c for c in ("doc_id", "text", "tokens") if c in table.column_names]
        rows[entry.name] = table.select(keep).sort_by("doc_id")
    return rows


@pytest.fixture
def connected(ray_address: str) -> Iterator[None]:
    """This process connected to the session's Ray, with no warm workers before or after."""
    import ray

    if not ray.is_initialized():
        ray.init(address=ray_address, logging_level="WARNING", log_to_driver=False)
    warm_pool.retire_other_pools()
    yield
    warm_pool.retire_other_pools()


def test_later_commands_call_the_same_warm_workers_and_get_the_tasks_results(
    connected: None, tmp_path: Path
) -> None:
    warm_home, task_home = tmp_path / "warm" / "fm", tmp_path / "tasks" / "fm"
    first = _run_batches(warm_home, "2", [WGET_WARC])
    workers = _pool_pids()
    assert len(workers) == 2, workers  # one pool of two, started by the first command
    second = _run_batches(warm_home, "2", [WGET_WARC_2])
    # The second command started no worker of its own: the same processes did its work.
    assert _pool_pids() == workers
    plain = _run_batches(task_home, "0", [WGET_WARC, WGET_WARC_2])
    assert _pool_pids() == workers  # plain tasks leave the pool alone
    for warm_batch, task_batch in zip([*first, *second], plain, strict=True):
        assert _stage_rows(warm_home, "2", warm_batch) == _stage_rows(task_home, "0", task_batch)


def _sleep_then_pid(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_a_worker_killed_mid_call_runs_the_call_again(connected: None) -> None:
    import ray
    import ray.cloudpickle

    # Shipped by value: the workers cannot import this test module.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    pool = warm_pool.open_pool(1, {"RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "")})
    ((name, pid),) = _pool_pids().items()
    ref = pool.submit(_sleep_then_pid, (10,), 1)
    time.sleep(3)  # the call is running
    os.kill(pid, signal.SIGKILL)
    # Ray restarted the worker and ran the whole call again in the new process.
    ran_in = ray.get(ref, timeout=180)
    assert ran_in != pid
    assert _pool_pids() == {name: ran_in}


def test_other_code_or_settings_retire_the_old_pool(connected: None) -> None:
    old = warm_pool.open_pool(2, {"SETTING": "one"})
    old_names = set(_pool_pids())
    assert len(old_names) == 2
    new = warm_pool.open_pool(2, {"SETTING": "two"})
    assert new.fingerprint != old.fingerprint
    names = set(_pool_pids())
    assert len(names) == 2 and not names & old_names
    # The same code and settings find the running pool instead of starting another.
    again = warm_pool.open_pool(2, {"SETTING": "two"})
    assert again.fingerprint == new.fingerprint and set(_pool_pids()) == names


def _record_warm_up() -> None:
    with open(os.environ["WARM_UP_LOG"], "a") as log:
        log.write(f"{os.getpid()}\n")


def test_each_worker_warms_up_once_before_its_first_call(connected: None, tmp_path: Path) -> None:
    import ray.cloudpickle

    # Shipped by value: the workers cannot import this test module.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    log = tmp_path / "warm-ups"
    env = {"RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", ""), "WARM_UP_LOG": str(log)}
    for _ in range(3):  # three commands opening the same pool
        warm_pool.open_pool(2, env, _record_warm_up)
    pids = _pool_pids()  # answered after the warm-ups queued ahead of it
    assert len(pids) == 2
    assert sorted(map(int, log.read_text().split())) == sorted(pids.values())
