"""deduplicated_pairs: images repeating a kept image of their data namespace quarantined: the same
decoded pixels (`exact_duplicate_image`), or a pHash within the policy's distance
(`near_duplicate_image`).

The decision needs the whole batch and the namespace's `image_index`, so the runner makes it in
one Ray task (`execution.image_dedup`) and hands each slice its verdicts; `apply` turns them into
kept and quarantine rows. `process` decides a table on its own (no other batch), for tests.
Batches are serialised at this stage (the runner's namespace lock and the Dagster pool
`neardup`), so two batches never both keep the same image.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa

from fm_assets.curation.images.near_dup import ImageIndex, Verdict
from fm_assets.stages.base import Stage, StageResult, quarantine_rows
from fm_assets.storage.image_text_schemas import PAIRS

# doc_id of a pair of the batch -> why it is not kept
Verdicts = Mapping[str, Verdict]


@dataclass(frozen=True)
class ImageDedupStage(Stage):
    """Pairs whose image repeats no kept image of the namespace (exact pixels or pHash).

    Quarantine images with the same decoded pixels as, or a pHash within the policy's Hamming
    distance of, an image kept earlier in the batch or by another batch of the namespace.
    """

    name: ClassVar[str] = "deduplicated_pairs"
    version: ClassVar[str] = "1"
    output_schema: ClassVar[pa.Schema] = PAIRS
    slices_per_cpu: ClassVar[int] = 1  # microseconds per pair

    max_distance: int = 8

    def decide(self, batch: pa.Table, index: ImageIndex) -> dict[str, Verdict]:
        """Verdicts for the rows of `batch` in order, against `index` (which keeps the rest)."""
        verdicts: dict[str, Verdict] = {}
        for doc_id, batch_id, pixels, phash in zip(
            *(batch.column(c).to_pylist() for c in ("doc_id", "batch_id", "pixel_hash", "phash")),
            strict=True,
        ):
            verdict = index.decide(doc_id, batch_id, pixels, phash)
            if verdict is not None:
                verdicts[doc_id] = verdict
        return verdicts

    def process(self, batch: pa.Table) -> StageResult:
        """Decide `batch` on its own, in order, against no other batch."""
        return self.apply(batch, self.decide(batch, ImageIndex(self.max_distance)))

    def apply(self, batch: pa.Table, verdicts: Verdicts) -> StageResult:
        """Keep the rows without a verdict; quarantine the others with their reason."""
        doc_ids = batch.column("doc_id").to_pylist()
        keep = pa.array([d not in verdicts for d in doc_ids], pa.bool_())
        bad = [
            {
                "record_id": batch.column("record_id")[row].as_py(),
                "doc_id": doc_id,
                "raw_sha256": batch.column("raw_sha256")[row].as_py(),
                "source_file": batch.column("source_file")[row].as_py(),
                "rule": verdicts[doc_id].rule,
                "reason": verdicts[doc_id].reason(self.max_distance),
            }
            for row, doc_id in enumerate(doc_ids)
            if doc_id in verdicts
        ]
        kept = batch.select(self.output_schema.names).filter(keep).cast(self.output_schema)
        return StageResult(kept, quarantine_rows(bad))
