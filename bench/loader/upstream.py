"""Upstream `streaming.StreamingDataset`: quieting it, closing it as far as it lets us, and
finding the lock files it leaves in the temp directory."""

from __future__ import annotations

import gc
import logging
import os
import tempfile
import warnings
from typing import Any


def quiet_upstream() -> None:
    logging.getLogger("streaming").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="streaming")


UPSTREAM_CLOSED = 0  # StreamingDatasets this process made and closed


def close_upstream(ds: Any) -> None:
    """Stop a StreamingDataset's background threads and clean its shared memory, as far as
    upstream lets us.

    Upstream has no public close: an iteration abandoned early leaves its download/ready threads
    polling (and the dataset alive); `_iterator.exit()` and the executor's shutdown stop them.
    Its /dev/shm blocks outlive the object, so clean_stale_shared_memory() runs after each use
    (section 4 reports how much that actually removes).
    """
    from streaming.base.util import clean_stale_shared_memory

    global UPSTREAM_CLOSED
    UPSTREAM_CLOSED += 1
    iterator = getattr(ds, "_iterator", None)
    if iterator is not None:
        iterator.exit()
    executor = getattr(ds, "_executor", None)
    if executor is not None:
        executor.shutdown(wait=True)
    del ds
    gc.collect()
    clean_stale_shared_memory()


def streaming_filelocks() -> set[str]:
    """StreamingDataset's lock files in the temp directory: <6-digit prefix>_<name>_filelock."""
    names = {"barrier_filelock", "cache_filelock"}
    return {e for e in os.listdir(tempfile.gettempdir()) if e[:6].isdigit() and e[7:] in names}
