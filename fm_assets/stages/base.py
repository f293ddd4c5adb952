"""The stage contract: a pure, versioned transform from an Arrow table to (kept, quarantined).

A stage knows nothing of Dagster or Iceberg. The runner (`execution/runner.py`) has Ray workers
read slices of the input, call `process` and write the results as data files; decisions that
need the whole batch and earlier batches (exact and near duplicates) are made across slices in
`execution/`; the driver commits.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa

from fm_assets.storage import schemas
from fm_assets.storage.tables import TableSpec, declare


@dataclass(frozen=True)
class StageResult:
    """Records a stage kept (in its output schema) and quarantined (QUARANTINED_RECORDS).

    `side` holds rows for the stage's side tables (e.g. the PII audit), by table name; the
    runner replaces the batch's partition of each in the same run.
    """

    kept: pa.Table
    quarantined: pa.Table
    side: dict[str, pa.Table] = field(default_factory=dict)

    @classmethod
    def concat(cls, results: Iterable[StageResult], output_schema: pa.Schema) -> StageResult:
        results = list(results)
        kept = [r.kept for r in results if r.kept.num_rows]
        bad = [r.quarantined for r in results if r.quarantined.num_rows]
        side: dict[str, list[pa.Table]] = {}
        for r in results:
            for name, table in r.side.items():
                side.setdefault(name, []).append(table)
        return cls(
            kept=pa.concat_tables(kept) if kept else output_schema.empty_table(),
            quarantined=pa.concat_tables(bad) if bad else schemas.QUARANTINED_RECORDS.empty_table(),
            side={name: pa.concat_tables(tables) for name, tables in side.items()},
        )


class Stage(ABC):
    """One curation step. Subclasses are frozen dataclasses whose fields are their config.

    `name` is the stage's one name: its output table (declared here, one per data namespace in
    that namespace's catalog namespace, partitioned by batch and data namespace), its Dagster
    asset and its pipeline entry. The first paragraph of the class docstring describes
    the asset. Bump `version` whenever the output for the same input and config would change:
    the version is part of the content key that lets reruns skip work.
    """

    name: ClassVar[str]
    version: ClassVar[str]
    output_schema: ClassVar[pa.Schema]
    # Side tables the stage writes, replaced per batch with its output (see StageResult.side).
    side_tables: ClassVar[tuple[str, ...]] = ()
    # Slices per Ray CPU the runner cuts the input into (within the slice byte bounds of
    # `execution/planning.py`). Several, for stages that spend milliseconds per document
    # (extraction, scoring): a slow last slice then holds up the stage less. One, for stages
    # of a fraction of a millisecond per document: each slice costs a task, a read and a write
    # of data files, more than the imbalance of fewer slices.
    slices_per_cpu: ClassVar[int] = 4

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            by_namespace = ("namespace",) if "namespace" in cls.output_schema.names else ()
            declare(
                TableSpec(
                    cls.name, cls.output_schema, ("batch_id", *by_namespace), per_namespace=True
                )
            )

    @classmethod
    def description(cls) -> str:
        """The first paragraph of the class docstring: what the stage's table holds."""
        doc = inspect.getdoc(cls) or cls.name
        return " ".join(doc.split("\n\n")[0].split())

    def config(self) -> dict[str, object]:
        """The fields that decide the output: every dataclass field but `compare=False` ones
        (where to reach a store, a registry copy's location), which are not content."""
        if not dataclasses.is_dataclass(self):
            return {}
        return {
            f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.compare
        }

    def config_hash(self) -> str:
        canonical = json.dumps(self.config(), sort_keys=True, default=str)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    @abstractmethod
    def process(self, batch: pa.Table) -> StageResult:
        """Transform one chunk of input rows; runs on a Ray worker."""


def _plain(value: object) -> object:
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value  # type: ignore[arg-type]


def quarantine_rows(rows: list[dict[str, object]]) -> pa.Table:
    """Build a QUARANTINED_RECORDS table from dicts with record_id, doc_id, ..., rule, reason."""
    return pa.Table.from_pylist(rows, schema=schemas.QUARANTINED_RECORDS)


def provenance_columns(batch: pa.Table) -> dict[str, pa.ChunkedArray]:
    """The provenance columns of a document table, to carry into the next stage's output."""
    return {f.name: batch.column(f.name) for f in schemas.PROVENANCE_FIELDS}


def split_kept(
    batch: pa.Table,
    keep_mask: list[bool],
    new_columns: dict[str, list[object] | pa.Array],
    output_schema: pa.Schema,
    rejects: list[tuple[int, str, str]],
) -> StageResult:
    """Assemble a StageResult from a per-row keep mask, new column values and reject reasons.

    `new_columns` hold values for every input row (None where rejected); `rejects` are
    (row index, rule, reason) for the rows not kept.
    """
    # Usually every row is kept: then a filter would only copy every column (the text, tokens).
    mask = None if all(keep_mask) else pa.array(keep_mask, type=pa.bool_())
    columns: dict[str, pa.Array | pa.ChunkedArray] = {}
    for column in output_schema:
        if column.name in new_columns:
            values = new_columns[column.name]
            if not isinstance(values, pa.Array):
                values = pa.array(values, type=column.type)
        else:
            values = batch.column(column.name)
        columns[column.name] = values if mask is None else values.filter(mask)
    kept = pa.table(columns, schema=output_schema)
    bad = quarantine_rows(
        [
            {
                "record_id": batch.column("record_id")[i].as_py(),
                "doc_id": batch.column("doc_id")[i].as_py(),
                "raw_sha256": batch.column("raw_sha256")[i].as_py(),
                "source_file": batch.column("source_file")[i].as_py(),
                "rule": rule,
                "reason": reason,
            }
            for i, rule, reason in rejects
        ]
    )
    return StageResult(kept=kept, quarantined=bad)
