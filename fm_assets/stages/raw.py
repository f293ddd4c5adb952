"""raw_documents: parse landed files into records, content-address them, drop exact duplicates."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa
import pyarrow.fs as pafs

from fm_assets.formats import ParsedRecord, UnreadableRecord, iter_file_records
from fm_assets.stages.base import CombineContext, Stage, StageResult, quarantine_rows
from fm_assets.storage import schemas
from fm_assets.storage.objectstore import filesystem_for

# The input of the raw stage: one row per landed file (built from the batch manifest).
LANDED_FILES = pa.schema(
    [
        pa.field("batch_id", pa.string()),
        pa.field("file_name", pa.string()),
        pa.field("file_sha256", pa.string()),
        pa.field("file_uri", pa.string()),
        pa.field("source", pa.string()),
        pa.field("license", pa.string()),
        pa.field("namespace", pa.string()),
    ]
)


def record_id_for(file_sha256: str, index: int) -> str:
    return f"{file_sha256[:16]}:{index}"


def _open_uri(uri: str, s3_endpoint: str | None) -> pafs.NativeFile:
    fs, path = filesystem_for(uri, s3_endpoint)
    # compression=None: the parser sniffs gzip itself; pyarrow would guess from the extension
    # and fail on a damaged .gz before the parser could keep the readable records.
    return fs.open_input_stream(path, compression=None)


def _reject(
    file: dict[str, str],
    record_id: str,
    doc_id: str | None,
    raw_sha256: str | None,
    rule: str,
    reason: str,
) -> dict[str, object]:
    return {
        "record_id": record_id,
        "doc_id": doc_id,
        "raw_sha256": raw_sha256,
        "source_file": file["file_name"],
        "rule": rule,
        "reason": reason,
    }


@dataclass(frozen=True)
class RawStage(Stage):
    """Parsed, validated, content-addressed records; exact duplicates quarantined.

    Parse each landed file; every record becomes a document row or a quarantine row.
    """

    name: ClassVar[str] = "raw_documents"
    version: ClassVar[str] = "1"
    output_schema: ClassVar[pa.Schema] = schemas.RAW_DOCUMENTS

    max_document_bytes: int = 8 * 1024 * 1024
    # Where to reach S3-compatible stores; not part of the content key.
    s3_endpoint: str | None = field(default=None, compare=False)

    def process(self, batch: pa.Table) -> StageResult:
        rows: list[dict[str, object]] = []
        rejects: list[dict[str, object]] = []
        for file in batch.to_pylist():
            next_index = 0
            try:
                with _open_uri(file["file_uri"], self.s3_endpoint) as stream:
                    for item in iter_file_records(file["file_name"], stream):
                        next_index = item.index + 1
                        record_id = record_id_for(file["file_sha256"], item.index)
                        if isinstance(item, UnreadableRecord):
                            rejects.append(
                                _reject(
                                    file, record_id, None, item.raw_sha256, item.rule, item.reason
                                )
                            )
                            continue
                        self._admit(file, record_id, item, rows, rejects)
            except OSError as exc:
                # The parser turns bad content into quarantine rows itself; this is the store
                # failing under it. Keep what was read and account for the rest of the file.
                rejects.append(
                    _reject(
                        file,
                        record_id_for(file["file_sha256"], next_index),
                        None,
                        None,
                        "read_error",
                        f"reading stopped after record {next_index - 1}: {exc}",
                    )
                )
        kept = pa.Table.from_pylist(rows, schema=schemas.RAW_DOCUMENTS)
        return StageResult(kept=kept, quarantined=quarantine_rows(rejects))

    def _admit(
        self,
        file: dict[str, str],
        record_id: str,
        item: ParsedRecord,
        rows: list[dict[str, object]],
        rejects: list[dict[str, object]],
    ) -> None:
        sha = hashlib.sha256(item.content).hexdigest()
        problem = None
        if not item.content.strip():
            problem = ("empty_record", "the record has no content (empty or only whitespace)")
        elif len(item.content) > self.max_document_bytes:
            problem = (
                "document_too_large",
                f"{len(item.content):,} bytes exceeds max_document_bytes="
                f"{self.max_document_bytes:,} (FM_MAX_DOCUMENT_BYTES)",
            )
        if problem:
            rejects.append(_reject(file, record_id, sha, sha, *problem))
            return
        rows.append(
            {
                "doc_id": sha,
                "raw_sha256": sha,
                "batch_id": file["batch_id"],
                "record_id": record_id,
                "source_file": file["file_name"],
                "source": file["source"],
                "license": file["license"],
                "namespace": file["namespace"],
                "url": item.url,
                "lang_hint": item.lang_hint,
                "external_id": item.external_id,
                "content_type": item.content_type,
                "charset": item.charset,
                "raw_size": len(item.content),
                "raw_content": item.content,
            }
        )

    def combine(self, result: StageResult, context: CombineContext) -> StageResult:
        """Quarantine exact duplicates: within the batch the first record wins."""
        kept = result.kept
        seen: dict[str, str] = {}
        keep_mask: list[bool] = []
        rejects: list[dict[str, object]] = []
        ids = kept.column("doc_id").to_pylist()
        records = kept.column("record_id").to_pylist()
        files = kept.column("source_file").to_pylist()
        for doc_id, record_id, source_file in zip(ids, records, files, strict=True):
            original = context.earlier_documents.get(doc_id) or seen.get(doc_id)
            if original is None:
                seen[doc_id] = f"{context.batch_id}/{record_id}"
                keep_mask.append(True)
                continue
            keep_mask.append(False)
            rejects.append(
                {
                    "record_id": record_id,
                    "doc_id": doc_id,
                    "raw_sha256": doc_id,
                    "source_file": source_file,
                    "rule": "exact_duplicate",
                    "reason": f"same raw bytes as {original}",
                }
            )
        if not rejects:
            return result
        return StageResult(
            kept=kept.filter(pa.array(keep_mask)),
            quarantined=pa.concat_tables([result.quarantined, quarantine_rows(rejects)]),
        )
