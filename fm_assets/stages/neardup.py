"""near_deduplicated_documents: MinHash LSH against every other batch's kept documents.

Workers shingle and sketch their chunk (`process`); the driver (`combine`) loads the global index
(`neardup_index`, every other batch's band hashes and shingle sets), decides the batch in order,
confirming each LSH candidate by the exact Jaccard of its shingles, and hands back this batch's
index rows. Batches are serialised at this stage (the Dagster pool `neardup`, limit 1), so two
batches never both keep a near-duplicate pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pyarrow as pa

from fm_assets.curation.minhash.index import NearDupIndex
from fm_assets.curation.minhash.signatures import (
    MINHASH_VERSION,
    BatchSketch,
    MinHashConfig,
    sketch,
)
from fm_assets.stages.base import CombineContext, Stage, StageResult, quarantine_rows
from fm_assets.storage import schemas

_SKETCH_FIELDS = [
    pa.field("_shingles", pa.large_list(pa.int64()), nullable=False),
    pa.field("_bands", pa.list_(pa.int64()), nullable=False),
]
NEARDUP_WORK = pa.schema([*schemas.TEXT_DOCUMENTS, *_SKETCH_FIELDS])


@dataclass(frozen=True)
class NearDupStage(Stage):
    """MinHash LSH (14x8 bands, exact Jaccard >= 0.8) against every batch's kept documents.

    Quarantine documents whose shingle Jaccard with a kept document reaches the threshold.
    """

    name: ClassVar[str] = "near_deduplicated_documents"
    version: ClassVar[str] = f"1-{MINHASH_VERSION}"
    output_schema: ClassVar[pa.Schema] = schemas.TEXT_DOCUMENTS
    work_schema: ClassVar[pa.Schema | None] = NEARDUP_WORK
    side_tables: ClassVar[tuple[str, ...]] = ("neardup_index",)

    minhash: MinHashConfig = field(default_factory=MinHashConfig)

    def process(self, batch: pa.Table) -> StageResult:

        made = sketch(batch.column("text").to_pylist(), self.minhash)
        shingles = pa.array([s.view(np.int64) for s in made.shingles], pa.large_list(pa.int64()))
        bands = pa.array(list(made.bands.view(np.int64)), pa.list_(pa.int64()))
        work = batch.select(schemas.TEXT_DOCUMENTS.names).cast(schemas.TEXT_DOCUMENTS)
        work = work.append_column(_SKETCH_FIELDS[0], shingles).append_column(
            _SKETCH_FIELDS[1], bands
        )
        return StageResult(work, schemas.QUARANTINED_RECORDS.empty_table())

    def combine(self, result: StageResult, context: CombineContext) -> StageResult:
        work = result.kept
        others = context.read_other_batches("neardup_index", None)
        where = (
            dict(
                zip(
                    others.column("doc_id").to_pylist(),
                    others.column("batch_id").to_pylist(),
                    strict=True,
                )
            )
            if others.num_rows
            else {}
        )
        index = NearDupIndex.from_rows(
            others.drop_columns(["batch_id"]) if others.num_rows else others, self.minhash
        )
        made = BatchSketch(
            shingles=[
                np.asarray(s, dtype=np.int64).view(np.uint64)
                for s in work.column("_shingles").to_pylist()
            ],
            bands=np.asarray(work.column("_bands").to_pylist(), dtype=np.int64)
            .reshape(work.num_rows, self.minhash.bands)
            .view(np.uint64),
        )
        doc_ids = work.column("doc_id").to_pylist()
        decisions = index.decide(doc_ids, made)
        keep = np.array([not d.is_duplicate for d in decisions], dtype=bool)
        kept = work.drop_columns([f.name for f in _SKETCH_FIELDS]).filter(pa.array(keep))
        bad = []
        for row, decision in enumerate(decisions):
            if decision.is_duplicate:
                home = where.get(decision.duplicate_of, context.batch_id)
                bad.append(
                    {
                        "record_id": work.column("record_id")[row].as_py(),
                        "doc_id": decision.doc_id,
                        "raw_sha256": work.column("raw_sha256")[row].as_py(),
                        "source_file": work.column("source_file")[row].as_py(),
                        "rule": "near_duplicate",
                        "reason": (
                            f"near-duplicate of kept document {decision.duplicate_of} "
                            f"(batch {home}): shingle Jaccard {decision.jaccard:.3f} >= "
                            f"{self.minhash.threshold}"
                        ),
                    }
                )
        rows = index.new_index_rows()
        rows = rows.add_column(
            0, "batch_id", pa.array([context.batch_id] * rows.num_rows, pa.string())
        )
        return StageResult(
            kept.cast(self.output_schema),
            pa.concat_tables([result.quarantined, quarantine_rows(bad)]),
            {"neardup_index": rows},
        )
