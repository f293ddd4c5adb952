"""pii_redacted_documents: emails, phones, public IPs and card numbers replaced by tokens.

Every redaction is recorded in `pii_redactions` (document, type, span, rule version) without the
redacted value. No document is dropped here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa

from fm_assets.curation.pii.redaction import PII_RULES_VERSION, redact_batch
from fm_assets.stages.base import Stage, StageResult, split_kept
from fm_assets.storage import schemas


@dataclass(frozen=True)
class PiiStage(Stage):
    """Emails, phones, public IPs and card numbers replaced by tokens; audit in pii_redactions.

    Redact PII (or pass text through when the dataset's policy turns redaction off).
    """

    name: ClassVar[str] = "pii_redacted_documents"
    slices_per_cpu: ClassVar[int] = 1  # a fraction of a millisecond per document
    version: ClassVar[str] = f"1-{PII_RULES_VERSION}"
    output_schema: ClassVar[pa.Schema] = schemas.TEXT_DOCUMENTS
    side_tables: ClassVar[tuple[str, ...]] = ("pii_redactions",)

    enabled: bool = True

    def process(self, batch: pa.Table) -> StageResult:
        texts = batch.column("text").to_pylist()
        n = len(texts)
        if not self.enabled:
            return split_kept(batch, [True] * n, {}, self.output_schema, [])
        redacted, found = redact_batch(texts)
        doc_ids = batch.column("doc_id").to_pylist()
        batch_ids = batch.column("batch_id").to_pylist()
        audit = [
            {
                "batch_id": batch_ids[i],
                "doc_id": doc_ids[i],
                "kind": r.kind,
                "start": r.start,
                "end": r.end,
                "rule_version": r.rule_version,
            }
            for i, redactions in enumerate(found)
            for r in redactions
        ]
        result = split_kept(batch, [True] * n, {"text": redacted}, self.output_schema, [])
        return StageResult(
            result.kept,
            result.quarantined,
            {"pii_redactions": pa.Table.from_pylist(audit, schema=schemas.PII_REDACTIONS)},
        )
