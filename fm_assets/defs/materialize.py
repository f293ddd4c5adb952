"""Materializing assets in-process against the instance under FM_HOME, as the `fm` command does.

Every run the CLI makes goes through Dagster, so it shows up in the UI with its checks and lineage.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg

from fm_assets.defs import build_definitions
from fm_assets.defs.instance import ensure_dagster_home, ensure_pool_limits
from fm_assets.defs.partitions import add_partition_keys, shard_set_partitions
from fm_assets.defs.run_health import SlotWatch, process_tags, reap_dead_runs
from fm_assets.execution.heap import freeze_long_lived
from fm_assets.settings import Settings
from fm_assets.storage.locks import exclusive
from fm_assets.storage.services import check_services

Log = Callable[[str], None]


class ChecksFailed(RuntimeError):
    """A materialization failed or one of its blocking checks did not pass."""


# One instance per Dagster home and storage for the process: opening one reads dagster.yaml and
# sets up its storages (~0.4 s), and a command (`fm shards build`) asks up to three times. Its
# storages connect per operation (SQLite and Postgres both without a pool), so a kept instance
# holds no connection a restarted server could leave stale.
_INSTANCES: dict[tuple[str, str, str | None], dg.DagsterInstance] = {}


def dagster_instance(settings: Settings) -> dg.DagsterInstance:
    """The Dagster instance (embedded or production), with the platform's pool limits set."""
    check_services(settings)  # before Dagster's own connection retries, naming the setting
    home = ensure_dagster_home(settings)
    key = (str(home), (home / "dagster.yaml").read_text(), settings.dagster_pg_url)
    if key not in _INSTANCES:
        # Two commands starting at once on a new FM_HOME would both create the SQLite run
        # storage ("table already exists"): one at a time.
        with exclusive(settings, "dagster instance storage"):
            instance = dg.DagsterInstance.get()
        ensure_pool_limits(instance)
        _INSTANCES[key] = instance
    return _INSTANCES[key]


def add_partitions(
    settings: Settings, partitions_def: dg.DynamicPartitionsDefinition, keys: list[str]
) -> None:
    """Add keys to a dynamic partitions definition (idempotent, safe from several processes)."""
    add_partition_keys(dagster_instance(settings), partitions_def, keys)


def shard_set_partition(version_key: str, config: str) -> dg.MultiPartitionKey:
    """The `shard_set` partition of a version and a shard config."""
    dimensions = {d.name for d in shard_set_partitions.partitions_defs}
    if dimensions != {"version", "shard_config"}:
        raise RuntimeError(f"shard_set partitions changed shape: {sorted(dimensions)}")
    return dg.MultiPartitionKey({"version": version_key, "shard_config": config})


def materialize(
    settings: Settings,
    keys: list[str],
    partition_key: str | dg.MultiPartitionKey,
    log: Log,
    run_config: dict[str, Any] | None = None,
    tags: dict[str, str] | None = None,
) -> None:
    """Materialize assets in-process; log every check; raise ChecksFailed unless all passed."""
    warnings.filterwarnings("ignore", category=dg.PreviewWarning)
    # Dagster's console logger would print every event and a stack trace per failure on the
    # terminal; progress comes through `fm.progress`, failures as one line each (below), and the
    # full record stays in the run's event log (the UI) and in $FM_HOME/logs.
    config = {
        "loggers": {"console": {"config": {"log_level": "CRITICAL"}}},
        **(run_config or {}),
    }
    defs = build_definitions()
    instance = dagster_instance(settings)
    freeze_long_lived("definitions")  # they, the instance and their imports stay for good
    # A killed earlier run must not hold slots forever.
    reap_dead_runs(instance, log, by="a later fm command, before starting its run")
    invocation = uuid.uuid4().hex
    with SlotWatch(instance, invocation, log):
        result = _materialize(defs, keys, partition_key, instance, config, tags, invocation)
    failures = []
    for evaluation in result.get_asset_check_evaluations():
        description = evaluation.metadata.get("description")
        text = description.value if description is not None else ""
        name = f"{evaluation.asset_check_key.asset_key.to_user_string()}.{evaluation.check_name}"
        log(f"check {name}: {'passed' if evaluation.passed else 'FAILED'} {text}")
        if not evaluation.passed:
            failures.append(f"{name}: {text}")
    if not result.success:
        log_file = _failure_log(settings, result.run_id)
        for event in result.all_events:
            if not event.is_step_failure:
                continue
            error = event.step_failure_data.error
            # The stage's own exception, not Dagster's wrapper around it.
            cause = error.cause if error and error.cause else error
            message = cause.message.strip().splitlines()[0] if cause else "failed"
            failures.append(f"{event.step_key} failed for {partition_key}: {message}")
            with log_file.open("a") as f:
                f.write(
                    f"{event.step_key} [{partition_key}]\n{error.to_string() if error else ''}\n"
                )
        failures.append(f"full trace in {log_file}")
    if failures:
        raise ChecksFailed("; ".join(failures))


def _materialize(
    defs: dg.Definitions,
    keys: list[str],
    partition_key: str | dg.MultiPartitionKey,
    instance: dg.DagsterInstance,
    config: dict[str, Any],
    tags: dict[str, str] | None,
    invocation: str,
) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        list(defs.assets or []),  # type: ignore[arg-type]
        selection=dg.AssetSelection.assets(*[dg.AssetKey(k) for k in keys]),
        partition_key=partition_key,  # type: ignore[arg-type]
        instance=instance,
        resources={"fm": defs.resources["fm"]} if defs.resources else None,
        run_config=config,
        # The process running it, so a later command can tell when it died.
        tags={**(tags or {}), **process_tags(invocation)},
        raise_on_error=False,
    )


def _failure_log(settings: Settings, run_id: str) -> Path:
    """Where the full traces of a failed in-process run are written."""
    directory = settings.home / "logs"
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"run-{run_id}.log"


def execute_job(settings: Settings, job: str, op: str, run_config: dict[str, Any], log: Log) -> Any:
    """Run job `job` of the code location in-process against the instance (so it shows in the
    UI); return op `op`'s output, or raise ChecksFailed naming the failure and its log file."""
    warnings.filterwarnings("ignore", category=dg.PreviewWarning)
    defs = build_definitions()
    instance = dagster_instance(settings)
    reap_dead_runs(instance, log, by="a later fm command, before starting its run")
    config = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}, **run_config}
    result = defs.resolve_job_def(job).execute_in_process(
        run_config=config,
        instance=instance,
        resources={"fm": defs.resources["fm"]} if defs.resources else None,
        tags=process_tags(),
        raise_on_error=False,
    )
    if result.success:
        return result.output_for_node(op)
    log_file = _failure_log(settings, result.run_id)
    failures = []
    for event in result.all_events:
        if not event.is_step_failure:
            continue
        error = event.step_failure_data.error
        cause = error.cause if error and error.cause else error
        failures.append(cause.message.strip().splitlines()[0] if cause else f"{job} failed")
        with log_file.open("a") as f:
            f.write(f"{event.step_key}\n{error.to_string() if error else ''}\n")
    raise ChecksFailed("; ".join([*failures, f"full trace in {log_file}"]))
