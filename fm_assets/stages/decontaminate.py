"""decontaminated_documents: documents holding a registered eval item, dropped or redacted.

Mandatory before tokenization. The registry is pinned by `registry` (its tables' snapshot ids),
so registering a benchmark changes this stage's content key and the next run of every batch
scans against it. Each match is audited in `contamination_matches`; a dropped document's
quarantine row names the benchmark and item.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa

from fm_assets.contamination.matcher import redact
from fm_assets.contamination.store import describe, load_matcher
from fm_assets.settings import Settings
from fm_assets.stages.base import Stage, StageResult, split_kept
from fm_assets.storage import schemas


@dataclass(frozen=True)
class DecontaminateStage(Stage):
    """Documents holding a registered eval item (n-gram overlap, numbers masked) dropped or
    redacted; mandatory before tokenization.

    Match every document against the registry at `registry`; drop (default) or redact.
    """

    name: ClassVar[str] = "decontaminated_documents"
    slices_per_cpu: ClassVar[int] = 1  # a fraction of a millisecond per document
    version: ClassVar[str] = "1"
    output_schema: ClassVar[pa.Schema] = schemas.TEXT_DOCUMENTS
    side_tables: ClassVar[tuple[str, ...]] = ("contamination_matches",)

    registry: str = "{}"  # registry_ref(): which registry rows this run matches against
    mode: str = "drop"
    threshold: float = 0.3
    rules_version: str = ""
    # Where workers read the registry from; not part of the output's identity.
    settings: Settings | None = field(default=None, compare=False)

    def process(self, batch: pa.Table) -> StageResult:

        if self.settings is None:
            raise ValueError("DecontaminateStage needs settings to read the registry")
        matcher = load_matcher(self.settings, self.registry, self.threshold)
        texts = batch.column("text").to_pylist()
        found = matcher.match(texts)
        doc_ids = batch.column("doc_id").to_pylist()
        batch_ids = batch.column("batch_id").to_pylist()
        action = "dropped" if self.mode == "drop" else "redacted"
        audit = [
            {
                "batch_id": batch_ids[i],
                "doc_id": doc_ids[i],
                "benchmark": m.benchmark,
                "item_id": m.item_id,
                "fraction": m.fraction,
                "rule": m.rule,
                "action": action,
            }
            for i, matches in enumerate(found)
            for m in matches
        ]
        if self.mode == "drop":
            keep = [not matches for matches in found]
            rejects = [
                (i, "contaminated", f"holds eval items: {describe(matches)}")
                for i, matches in enumerate(found)
                if matches
            ]
            result = split_kept(batch, keep, {}, self.output_schema, rejects)
        else:
            cleaned = [redact(t, m, " ") if m else t for t, m in zip(texts, found, strict=True)]
            result = split_kept(
                batch, [True] * len(texts), {"text": cleaned}, self.output_schema, []
            )
        return StageResult(
            result.kept,
            result.quarantined,
            {
                "contamination_matches": pa.Table.from_pylist(
                    audit, schema=schemas.CONTAMINATION_MATCHES
                )
            },
        )
