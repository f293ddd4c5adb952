"""near_deduplicated_documents: MinHash LSH against the kept documents of every other batch of
the same data namespace.

The decision needs the whole batch and its namespace's index, so the runner makes it with
band-partitioned Ray work (`execution.near_dedup.run`) and hands each slice its verdicts; `apply`
turns them into kept rows and quarantine rows. `process` decides a table on its own (no other
batch), for tools and tests. Batches are serialised at this stage (the Dagster pool `neardup`,
limit 1), so two batches never both keep a near-duplicate pair.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa

from fm_assets.curation.minhash.index import NearDupIndex
from fm_assets.curation.minhash.signatures import MINHASH_VERSION, MinHashConfig
from fm_assets.stages.base import Stage, StageResult, quarantine_rows
from fm_assets.storage import schemas

# Row of the batch -> (the kept document it duplicates, that document's batch, exact Jaccard).
Verdicts = Mapping[int, tuple[str, str, float]]


@dataclass(frozen=True)
class NearDupStage(Stage):
    """MinHash LSH (14x8 bands, exact Jaccard >= 0.8) against every batch of its namespace.

    Quarantine documents whose shingle Jaccard with a kept document reaches the threshold.
    """

    name: ClassVar[str] = "near_deduplicated_documents"
    slices_per_cpu: ClassVar[int] = 1  # a fraction of a millisecond per document
    version: ClassVar[str] = f"1-{MINHASH_VERSION}"
    output_schema: ClassVar[pa.Schema] = schemas.TEXT_DOCUMENTS
    side_tables: ClassVar[tuple[str, ...]] = ()  # the index tables are written per band/bucket

    minhash: MinHashConfig = field(default_factory=MinHashConfig)

    def process(self, batch: pa.Table) -> StageResult:
        """Decide `batch` on its own, in order, against no other batch."""
        index = NearDupIndex(self.minhash)
        decisions = index.find_duplicates(
            batch.column("doc_id").to_pylist(), batch.column("text").to_pylist()
        )
        batch_id = batch.column("batch_id")[0].as_py() if batch.num_rows else ""
        verdicts = {
            row: (d.duplicate_of, batch_id, d.jaccard)
            for row, d in enumerate(decisions)
            if d.duplicate_of is not None
        }
        return self.apply(batch, verdicts)

    def apply(self, batch: pa.Table, verdicts: Verdicts) -> StageResult:
        """Keep the rows of `batch` without a verdict; quarantine the others with their reason."""
        keep = pa.array([row not in verdicts for row in range(batch.num_rows)])
        bad = [
            {
                "record_id": batch.column("record_id")[row].as_py(),
                "doc_id": batch.column("doc_id")[row].as_py(),
                "raw_sha256": batch.column("raw_sha256")[row].as_py(),
                "source_file": batch.column("source_file")[row].as_py(),
                "rule": "near_duplicate",
                "reason": (
                    f"near-duplicate of kept document {original} (batch {home}): shingle Jaccard "
                    f"{jaccard:.3f} >= {self.minhash.threshold}"
                ),
            }
            for row, (original, home, jaccard) in sorted(verdicts.items())
        ]
        kept = batch.select(self.output_schema.names).filter(keep).cast(self.output_schema)
        return StageResult(kept, quarantine_rows(bad))
