"""Stage progress in Dagster: a long stage's figures become asset observations the UI plots; a
stage done within `OBSERVE_AFTER_S` writes none (its materialization carries its figures)."""

import sys
import time
from dataclasses import dataclass

import dagster as dg
import pytest
from dagster import AssetExecutionContext

from fm_assets.defs.progress import OBSERVE_AFTER_S, progress_logger
from fm_assets.execution.compute import run_tasks

pytestmark = pytest.mark.usefixtures("ray_session")


@dataclass(frozen=True)
class Slice:
    """What a slice task reports, as a stage's slice outcome does."""

    records_in: int
    bytes_in: int


def _read_slice(seconds: float) -> Slice:
    time.sleep(seconds)
    return Slice(records_in=10, bytes_in=1_000)


def _observations(task_seconds: float, tasks: int) -> tuple[list[dg.AssetObservation], list[str]]:
    """Materialize a one-partition asset whose body runs `tasks` Ray tasks one at a time, each
    taking `task_seconds`, with the stages' progress callback; its observations and log lines."""
    import ray
    import ray.cloudpickle

    # Workers cannot import this module by pytest's name for it: ship its code by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    read = ray.remote(_read_slice)
    lines: list[str] = []

    @dg.asset(partitions_def=dg.StaticPartitionsDefinition(["b-1"]))
    def stage(context: AssetExecutionContext) -> None:
        log = progress_logger(context)

        def progress(message: str) -> None:
            lines.append(message)
            log(message)

        run_tasks(
            lambda _: read.remote(task_seconds),
            tasks,
            max_in_flight=1,
            progress=progress,
            label="stage",
        )

    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([stage], partition_key="b-1", instance=instance)
    assert result.success
    found = instance.fetch_observations(dg.AssetKey("stage"), limit=20).records
    observed = [r.asset_observation for r in found if r.asset_observation is not None]
    return observed, lines


def test_a_long_stage_is_observed_to_its_end() -> None:
    observed, lines = _observations(task_seconds=OBSERVE_AFTER_S * 0.6, tasks=3)
    assert any(line.startswith("stage: 1/3 done") for line in lines)  # before 2 s: log only
    assert observed, "no progress observation for a stage running past OBSERVE_AFTER_S"
    last = observed[0].metadata  # newest first
    assert last["tasks_done"].value == last["tasks"].value == 3
    assert last["records_read"].value == 30 and last["bytes_read"].value == 3_000
    assert last["elapsed_s"].value >= OBSERVE_AFTER_S and last["eta_s"].value == 0
    assert all(o.partition == "b-1" for o in observed)


def test_a_short_stage_logs_its_progress_without_observations() -> None:
    observed, lines = _observations(task_seconds=0.01, tasks=2)
    assert any(line.startswith("stage: 2/2 done, 20 records") for line in lines)
    assert observed == []
