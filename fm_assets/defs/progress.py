"""Stage progress: to the run's Dagster log (the UI) and to the `fm.progress` Python logger, which
the `fm` command prints when it drives a run in-process; progress that carries figures (tasks,
records, bytes read, ETA) also becomes an asset observation, metadata the UI plots per run."""

from __future__ import annotations

import logging
from collections.abc import Callable

import dagster as dg

from fm_assets.execution.compute import ProgressLine

PROGRESS = logging.getLogger("fm.progress")


def progress_logger(context: dg.AssetExecutionContext) -> Callable[[str], None]:
    """A progress callback writing each message to both, and each figure to Dagster metadata."""

    def log(message: str) -> None:
        context.log.info(message)
        PROGRESS.info(message)
        # Only the loops that read the stage's input (slices, with records and bytes): the
        # others (scans, buckets, bands, checks) would add events, each a write to the event log.
        if isinstance(message, ProgressLine) and message.figures.get("records_read"):
            context.log_event(
                dg.AssetObservation(
                    asset_key=context.asset_key,
                    partition=context.partition_key,
                    metadata={"progress": str(message), **message.figures},
                )
            )

    return log
