"""What a Ray worker does with one slice of a batch: read its own input files, run the stage, write
its own output data files, and hand back only file lists and counts."""

from __future__ import annotations

import datetime as dt
import uuid
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa
from pyiceberg.manifest import DataFile

from fm_assets.execution.table_ranges import FileRange, read_ranges
from fm_assets.execution.task_clock import call_seconds
from fm_assets.stages.base import Stage, StageResult
from fm_assets.storage.data_files import TableHandle, write_files


@dataclass(frozen=True)
class Outputs:
    """Where a stage run's workers write: its table, the quarantine, its side tables; picklable."""

    batch_id: str
    stage: str
    code_version: str
    write_id: uuid.UUID  # one per run attempt: names every file it writes
    output: TableHandle
    quarantine: TableHandle
    side: dict[str, TableHandle] = field(default_factory=dict)


@dataclass(frozen=True)
class SliceOutcome:
    """What one slice produced: data files per table, and counts (never rows)."""

    files: dict[str, list[DataFile]]
    records_in: int
    kept: int
    quarantined: int
    rules: dict[str, int]
    bytes_in: int
    node: str = ""  # the Ray node that ran the slice ("" outside Ray)
    # What the slice's call cost: its process's CPU seconds, and GPU seconds (wall time times
    # the GPUs Ray gave it) where it held one.
    cpu_seconds: float = 0.0
    gpu_seconds: float = 0.0


def _current_node() -> str:
    import ray

    try:
        return str(ray.get_runtime_context().get_node_id() or "")
    except Exception:  # not in a Ray worker (a test calling a slice task directly)
        return ""


def _current_gpus() -> int:
    import ray

    try:
        return len(ray.get_gpu_ids())
    except Exception:  # not in a Ray worker
        return 0


def write_result(
    result: StageResult, outputs: Outputs, task_id: int, *, records_in: int, bytes_in: int
) -> SliceOutcome:
    """Write a slice's kept rows, quarantine rows and side rows as data files."""
    files: dict[str, list[DataFile]] = {
        outputs.output.name: write_files(outputs.output, result.kept, outputs.write_id, task_id),
        outputs.quarantine.name: write_files(
            outputs.quarantine,
            stamp_quarantine(result.quarantined, outputs),
            outputs.write_id,
            task_id,
        ),
    }
    for name, handle in outputs.side.items():
        rows = result.side.get(name)
        files[name] = [] if rows is None else write_files(handle, rows, outputs.write_id, task_id)
    rules = Counter(result.quarantined.column("rule").to_pylist())
    cpu, wall = call_seconds()
    return SliceOutcome(
        files=files,
        records_in=records_in,
        kept=result.kept.num_rows,
        quarantined=result.quarantined.num_rows,
        rules=dict(rules),
        bytes_in=bytes_in,
        node=_current_node(),
        cpu_seconds=cpu,
        gpu_seconds=wall * _current_gpus(),
    )


def stamp_quarantine(rows: pa.Table, outputs: Outputs) -> pa.Table:
    """QUARANTINED_RECORDS rows as `quarantine` rows: with batch, stage, code version, time."""
    n = rows.num_rows
    now = dt.datetime.now(dt.UTC)
    return (
        rows.append_column("batch_id", pa.array([outputs.batch_id] * n, pa.string()))
        .append_column("stage", pa.array([outputs.stage] * n, pa.string()))
        .append_column("code_version", pa.array([outputs.code_version] * n, pa.string()))
        .append_column("quarantined_at", pa.array([now] * n, pa.timestamp("us", tz="UTC")))
    )


def process_files(
    stage: Stage,
    source: TableHandle,
    ranges: list[FileRange],
    outputs: Outputs,
    task_id: int,
) -> SliceOutcome:
    """Read the slice's input rows, run `stage.process`, write the outputs (on a worker)."""
    batch = read_ranges(source, ranges)
    result = stage.process(batch)
    accounted = result.kept.num_rows + result.quarantined.num_rows
    if accounted != batch.num_rows:
        raise RuntimeError(
            f"stage {stage.name} {stage.version} lost records in a slice: {batch.num_rows} in, "
            f"{result.kept.num_rows} kept + {result.quarantined.num_rows} quarantined; "
            "this is a bug in the stage"
        )
    bytes_in = sum(stretch.stop - stretch.start for stretch in ranges)
    return write_result(result, outputs, task_id, records_in=batch.num_rows, bytes_in=bytes_in)
