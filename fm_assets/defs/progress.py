"""Stage progress: to the run's Dagster log (the UI) and to the `fm.progress` Python logger, which
the `fm` command prints when it drives a run in-process; progress that carries figures (tasks,
records, bytes read, ETA) of a stage still running after `OBSERVE_AFTER_S` also becomes an asset
observation, metadata the UI plots per run."""

from __future__ import annotations

import logging
from collections.abc import Callable

import dagster as dg

from fm_assets.execution.compute import ProgressLine

PROGRESS = logging.getLogger("fm.progress")
# Each observation is a write to the event log and the asset index (~9 ms on the embedded
# SQLite instance, a tenth of a small batch's whole stage). A stage done sooner than this
# has nothing to plot: its figures (records in, bytes read, seconds) are in its
# materialization.
OBSERVE_AFTER_S = 2.0


def progress_logger(context: dg.AssetExecutionContext) -> Callable[[str], None]:
    """A progress callback writing each message to both, and the figures of a long stage to
    Dagster metadata: each report from `OBSERVE_AFTER_S` on, then its last one."""
    observed = False

    def log(message: str) -> None:
        nonlocal observed
        context.log.info(message)
        PROGRESS.info(message)
        # Only the loops that read the stage's input (slices, with records and bytes): the
        # others (scans, buckets, bands, checks) would add events, each a write to the event log.
        if not isinstance(message, ProgressLine) or not message.figures.get("records_read"):
            return
        figures = message.figures
        finished = figures.get("tasks_done") == figures.get("tasks")
        if figures.get("elapsed_s", 0.0) >= OBSERVE_AFTER_S or (finished and observed):
            observed = True
            context.log_event(
                dg.AssetObservation(
                    asset_key=context.asset_key,
                    partition=context.partition_key,
                    metadata={"progress": str(message), **figures},
                )
            )

    return log
