"""Stage progress: to the run's Dagster log (the UI) and to the `fm.progress` Python logger, which
the `fm` command prints when it drives a run in-process."""

from __future__ import annotations

import logging
from collections.abc import Callable

import dagster as dg

PROGRESS = logging.getLogger("fm.progress")


def progress_logger(context: dg.AssetExecutionContext) -> Callable[[str], None]:
    """A progress callback writing each message to both."""

    def log(message: str) -> None:
        context.log.info(message)
        PROGRESS.info(message)

    return log
