"""The functions the spine benchmark runs as Ray tasks, shipped to the workers by value.

A script's functions travel by value; these live in a package, so `by_value()` registers this
module for the same treatment: the workers then import nothing of `bench`, and no import of
ours lands inside a timed region.
"""

from __future__ import annotations

import os
import sys
import time

import pyarrow as pa

from fm_assets.execution.slice_tasks import Outputs, process_files
from fm_assets.execution.table_ranges import FileRange
from fm_assets.stages.tokenize import TokenizeStage, load_tokenizer
from fm_assets.storage.data_files import TableHandle


def by_value() -> None:
    """Have Ray pickle this module's functions by value (idempotent)."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def niceness() -> int:
    """In a Ray worker: the niceness Ray runs its workers at."""
    return os.nice(0)


def profile_chunk(stage: TokenizeStage, chunk: pa.Table) -> dict[str, float]:
    """In a Ray worker: CPU seconds of encode_batch_fast, of the `.ids` lists, of `process`.

    The worker process's CPU time (the library's own threads included), not wall time: what
    other tenants of the machine take does not count.
    """
    tokenizer = load_tokenizer(stage.tokenizer_uri, stage.tokenizer_hash)
    texts = chunk.column("text").to_pylist()
    started = time.process_time()
    encodings = tokenizer.encode_batch_fast(texts, add_special_tokens=False)  # type: ignore[attr-defined]
    encode_s = time.process_time() - started
    started = time.process_time()
    ids = [e.ids for e in encodings]
    ids_s = time.process_time() - started
    del ids, encodings
    started = time.process_time()
    stage.process(chunk)
    process_s = time.process_time() - started
    return {"encode_s": encode_s, "ids_s": ids_s, "process_s": process_s}


def timed_slice(
    stage: TokenizeStage, source: TableHandle, ranges: list[FileRange], outputs: Outputs, task: int
) -> tuple[int, float]:
    """In a Ray worker: one slice as the runner's task runs it (read its rows, `process`, write
    its data files), with the worker pid and seconds."""
    started = time.perf_counter()
    process_files(stage, source, ranges, outputs, task)
    return os.getpid(), time.perf_counter() - started
