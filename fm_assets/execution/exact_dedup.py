"""The raw stage across a Ray cluster: parse landed files in parallel parts and decide exact
duplicates by hash-partitioned work, never on the driver.

    split    large files cut at record boundaries (one reading task per splittable large file)
    scan     per slice of parts: item counts, and each kept record's hash, sent to its bucket
    decide   per bucket: first occurrence wins (a record another batch of the same data namespace
             already indexed, looked up by its hash in that namespace's `document_index`
             bucket, reading only the rows of the bucket's hashes: `exact_dedup_index`; then
             the batch's own order); writes the bucket's index rows; routes duplicates back
    read     per slice: parse again, quarantine the duplicates, write the data files

The driver holds part and file lists, counts and object references; rows move worker to worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyiceberg.manifest import DataFile
from pyiceberg.table import FileScanTask

from fm_assets.execution import exact_dedup_index
from fm_assets.execution.compute import Progress, remote, run_tasks
from fm_assets.execution.planning import (
    balanced_groups,
    landed_parts,
    part_bytes,
    slice_bytes,
    slice_count,
    split_points,
    splittable,
)
from fm_assets.execution.slice_tasks import Outputs, SliceOutcome, write_result
from fm_assets.settings import Settings
from fm_assets.stages.raw import CANDIDATES, PartScan, RawStage, record_id_for
from fm_assets.storage import catalog, schemas
from fm_assets.storage.data_files import TableHandle, plan_files
from fm_assets.storage.landing import BatchManifest
from fm_assets.storage.objectstore import open_object_store

BUCKETS = schemas.DOCUMENT_INDEX_BUCKETS
MAX_ROUTES = 64  # duplicates flow back in at most this many groups per bucket
MIN_PART_BYTES = 1 << 20  # small batches: parts no smaller than this (a task costs too)

_DUPLICATES = pa.schema(
    [
        pa.field("part", pa.int64(), nullable=False),
        pa.field("item", pa.int64(), nullable=False),
        pa.field("original", pa.string(), nullable=False),  # "<batch>/<record id>" kept instead
    ]
)


@dataclass(frozen=True)
class RawRun:
    """What the raw stage produced across the batch."""

    slices: list[SliceOutcome]
    index_files: list[DataFile]


def run_raw(
    settings: Settings,
    stage: RawStage,
    manifest: BatchManifest,
    outputs: Outputs,
    index: TableHandle,
    cpus: int,
    progress: Progress,
) -> RawRun:
    """Parse every landed file of the batch and decide its exact duplicates, on Ray."""

    part = _part_size(settings, manifest, cpus)
    starts = _split_files(settings, manifest, part, progress) if stage.splits_large_files else {}
    parts = landed_parts(settings, manifest, starts)
    sizes = {f.sha256: f.size for f in manifest.files}
    weights = part_bytes(parts, sizes)
    # A slice holds no more than a part: parts smaller than the default (FM_PART_BYTES) ask for
    # finer slices too.
    slices = balanced_groups(
        list(range(parts.num_rows)), lambda i: weights[i], slice_count(sum(weights), cpus, part)
    )
    progress(
        f"{stage.name}: {len(manifest.files)} files in {parts.num_rows} parts, {len(slices)} slices"
    )

    scan = remote(_scan, num_returns=BUCKETS + 1)
    scanned: list[list[Any]] = [[] for _ in slices]

    def submit_scan(i: int) -> Any:
        # Sent when a worker is free (run_tasks), not all at once: a slice queued behind a
        # slow one would wait while another worker idles.
        scanned[i] = scan.remote(stage, parts.take(slices[i]))
        return scanned[i][0]

    counts: dict[int, tuple[int, int]] = {}
    for per_part in run_tasks(submit_scan, len(slices), progress=progress, label="scan"):
        counts.update(per_part)
    parts = _number_items(parts, counts)

    routes = min(len(slices), MAX_ROUTES)
    slice_of_part = {p: i for i, s in enumerate(slices) for p in s}
    where = parts.select(["part", "file_sha256", "first_index"]).append_column(
        "route", pa.array([slice_of_part[p] % routes for p in parts.column("part").to_pylist()])
    )
    decide = remote(_decide, num_returns=routes + 1)
    decided: list[list[Any]] = [  # type: ignore[misc]
        decide.remote(
            b,
            where,
            manifest.batch_id,
            routes,
            index,
            _other_batches_files(settings, b, manifest),
            outputs.write_id,
            *[refs[1 + b] for refs in scanned],
        )
        for b in range(BUCKETS)
    ]
    index_files = [
        f
        for files in run_tasks(lambda b: decided[b][0], BUCKETS, progress=progress, label="decide")
        for f in files
    ]

    read = remote(_read)
    outcomes = run_tasks(
        lambda i: read.remote(
            stage,
            parts.take(slices[i]),
            outputs,
            i,
            sum(weights[p] for p in slices[i]),
            *[refs[1 + i % routes] for refs in decided],
        ),
        len(slices),
        progress=progress,
        label=stage.name,
    )
    return RawRun(outcomes, index_files)


def _part_size(settings: Settings, manifest: BatchManifest, cpus: int) -> int:
    """The bytes of a part of a large landed file: FM_PART_BYTES, or less (down to
    MIN_PART_BYTES) when the batch is small, so that no file outweighs a slice (several per CPU)
    and holds up the stage, and every later stage, which slices the data files this one writes."""
    total = sum(f.size for f in manifest.files)
    return min(settings.part_bytes, max(MIN_PART_BYTES, slice_bytes(total, cpus)))


def _split_files(
    settings: Settings, manifest: BatchManifest, part: int, progress: Progress
) -> dict[str, list[int]]:
    """Part starts of the batch's large splittable files (over twice `part` bytes), found by
    one task per file."""

    store = open_object_store(settings)
    large = [
        (f, kind)
        for f in manifest.files
        if f.size > 2 * part and (kind := splittable(f)) is not None
    ]
    if not large:
        return {}
    splitter = remote(split_points)
    found = run_tasks(
        lambda i: splitter.remote(
            store.uri(large[i][0].key),
            large[i][1],
            large[i][0].size,
            part,
            settings.s3_endpoint,
        ),
        len(large),
        progress=progress,
        label="split",
    )
    return {f.sha256: points for (f, _), points in zip(large, found, strict=True)}


def _number_items(parts: pa.Table, counts: dict[int, tuple[int, int]]) -> pa.Table:
    """Fill each part's first item number and first line number within its file, and its
    file's item count, from each part's (items, lines)."""
    first: list[int] = []
    first_line: list[int] = []
    items: dict[str, int] = {}
    lines: dict[str, int] = {}
    for part, sha in zip(
        parts.column("part").to_pylist(), parts.column("file_sha256").to_pylist(), strict=True
    ):
        first.append(items.get(sha, 0))
        first_line.append(lines.get(sha, 0) + 1)
        items[sha] = items.get(sha, 0) + counts[part][0]
        lines[sha] = lines.get(sha, 0) + counts[part][1]
    file_items = [items[sha] for sha in parts.column("file_sha256").to_pylist()]
    for name, values in (
        ("first_index", first),
        ("first_line", first_line),
        ("file_items", file_items),
    ):
        parts = parts.set_column(
            parts.schema.get_field_index(name), name, pa.array(values, pa.int64())
        )
    return parts


def _other_batches_files(
    settings: Settings, bucket: int, manifest: BatchManifest
) -> list[FileScanTask]:
    """The `document_index` files of `bucket` holding every other batch of the batch's data
    namespace: exact dedup is per namespace (a batch never reads another namespace's index).

    Every other batch, not only those published earlier: batches run concurrently, and a batch
    published later may have committed first. The runner lets one raw stage at a time decide
    and commit per namespace (a lock on its `document_index`), so what it reads here is complete.
    """
    namespace = manifest.namespace
    if catalog.current_snapshot_id(settings, "document_index", namespace=namespace) is None:
        return []
    where = catalog.where_all(
        catalog.where_equal("bucket", bucket),
        catalog.where_not_equal("batch_id", manifest.batch_id),
    )
    return plan_files(settings, "document_index", where, None, namespace)


def _scan(stage: RawStage, parts: pa.Table) -> tuple[Any, ...]:
    """((items, lines) per part, then one CANDIDATES table per bucket): runs on a worker."""
    scans: list[PartScan] = stage.scan(parts)
    candidates = (
        pa.concat_tables([s.candidates for s in scans]) if scans else CANDIDATES.empty_table()
    )
    buckets = pa.array(
        [schemas.document_bucket(d) for d in candidates.column("doc_id").to_pylist()], pa.int32()
    )
    per_bucket = [candidates.filter(pa.compute.equal(buckets, b)) for b in range(BUCKETS)]
    return ({s.part: (s.items, s.lines) for s in scans}, *per_bucket)


def _decide(
    bucket: int,
    where: pa.Table,
    batch_id: str,
    routes: int,
    index: TableHandle,
    other_files: list[FileScanTask],
    write_id: Any,
    *candidate_tables: pa.Table,
) -> tuple[Any, ...]:
    """Decide one bucket's duplicates (on a worker); write its index rows; route duplicates back."""
    sha_of = dict(
        zip(where.column("part").to_pylist(), where.column("file_sha256").to_pylist(), strict=True)
    )
    first_of = dict(
        zip(where.column("part").to_pylist(), where.column("first_index").to_pylist(), strict=True)
    )
    route_of = dict(
        zip(where.column("part").to_pylist(), where.column("route").to_pylist(), strict=True)
    )
    rows = pa.concat_tables(candidate_tables) if candidate_tables else CANDIDATES.empty_table()
    rows = rows.sort_by([("part", "ascending"), ("item", "ascending")])
    # Only the index rows of the bucket's candidates' hashes are read (`exact_dedup_index`).
    kept_before = exact_dedup_index.kept_before(
        index, other_files, rows.column("doc_id").combine_chunks(), batch_id
    )
    winners: dict[str, str] = {}
    duplicates: list[list[dict[str, object]]] = [[] for _ in range(routes)]
    for doc_id, part, item in zip(
        *(rows.column(c).to_pylist() for c in ("doc_id", "part", "item")), strict=True
    ):
        record_id = record_id_for(sha_of[part], first_of[part] + item)
        original = kept_before.get(doc_id) or winners.get(doc_id)
        if original is None:
            winners[doc_id] = f"{batch_id}/{record_id}"
        else:
            duplicates[route_of[part]].append({"part": part, "item": item, "original": original})
    index_rows = pa.table(
        {
            "bucket": pa.array([bucket] * len(winners), pa.int32()),
            "doc_id": list(winners),
            "batch_id": [batch_id] * len(winners),
            "record_id": [w.split("/", 1)[1] for w in winners.values()],
        },
        schema=schemas.DOCUMENT_INDEX,
    )
    files = exact_dedup_index.write_index_rows(
        index, index_rows, bucket, write_id, 1_000_000 + bucket
    )
    return (files, *[pa.Table.from_pylist(d, schema=_DUPLICATES) for d in duplicates])


def _read(
    stage: RawStage,
    parts: pa.Table,
    outputs: Outputs,
    task_id: int,
    bytes_in: int,
    *duplicate_tables: pa.Table,
) -> SliceOutcome:
    """Parse the slice again, quarantine its duplicates, write its data files (on a worker)."""
    mine = set(parts.column("part").to_pylist())
    duplicates = {
        (part, item): original
        for table in duplicate_tables
        for part, item, original in zip(
            *(table.column(c).to_pylist() for c in ("part", "item", "original")), strict=True
        )
        if part in mine
    }
    result = stage.read(parts, duplicates)
    records = result.kept.num_rows + result.quarantined.num_rows
    return write_result(result, outputs, task_id, records_in=records, bytes_in=bytes_in)
