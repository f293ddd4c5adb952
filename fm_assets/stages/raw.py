"""raw_documents: parse landed files into records and content-address them.

The input is one row per part of a landed file (`LANDED_PARTS`): a whole file, or a byte range of
a large one cut where its records allow (`formats.splitting`). Reading a part happens twice per run:
`scan` numbers its items and lists the content hashes of the records it would keep, so the runner
can decide exact duplicates across the whole batch; `read` then parses it again and builds the rows,
quarantining the duplicates the runner names.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import BinaryIO, ClassVar, cast

import pyarrow as pa
import pyarrow.fs as pafs

from fm_assets.formats import ParsedRecord, ReadStats, UnreadableRecord
from fm_assets.formats.reader import FileRecordReader
from fm_assets.formats.records import Rule
from fm_assets.formats.splitting import RangeReader
from fm_assets.stages.base import Stage, StageResult, quarantine_rows
from fm_assets.storage import schemas
from fm_assets.storage.generators import Generator, generator_columns
from fm_assets.storage.objectstore import filesystem_for
from fm_loader.storage.retry import with_retries

# The input of the raw stage: one row per part of a landed file, in batch order.
LANDED_PARTS = pa.schema(
    [
        pa.field("batch_id", pa.string()),
        pa.field("file_name", pa.string()),
        pa.field("file_sha256", pa.string()),
        pa.field("file_uri", pa.string()),
        pa.field("source", pa.string()),
        pa.field("license", pa.string()),
        pa.field("namespace", pa.string()),
        pa.field("generator", pa.string()),  # the batch's generator (canonical JSON), if any
        pa.field("part", pa.int64()),  # position of the part in the batch: the order of records
        pa.field("start", pa.int64()),  # byte range of the file the part covers
        pa.field("end", pa.int64()),  # -1: to the end of the file
        pa.field("whole_file", pa.bool_()),  # the only part of its file
        pa.field("first_index", pa.int64()),  # number of the part's first item within its file
        pa.field("first_line", pa.int64()),  # JSONL: number of the part's first line in its file
        pa.field("file_items", pa.int64()),  # items of the whole file (-1 before the scan)
    ]
)

# What `scan` reports for each record it would keep: its hash and where it is.
CANDIDATES = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("part", pa.int64(), nullable=False),
        pa.field("item", pa.int64(), nullable=False),  # within the part, from 0
    ]
)


def record_id_for(file_sha256: str, index: int) -> str:
    return f"{file_sha256[:16]}:{index}"


@dataclass(frozen=True)
class PartScan:
    """What scanning one part found: how many items it numbers, and its candidate records."""

    part: int
    items: int
    lines: int  # physical lines read (JSONL), so later parts of the file number theirs on
    candidates: pa.Table  # CANDIDATES


@dataclass(frozen=True)
class RawStage(Stage):
    """Parsed, validated, content-addressed records; exact duplicates quarantined.

    Every record of a landed file becomes a document row or a quarantine row; records whose raw
    bytes equal a record already kept (earlier in this batch, or by another batch) are
    quarantined as `exact_duplicate`, naming the record that was kept.
    """

    name: ClassVar[str] = "raw_documents"
    # 2: where each record is in its file; 3: generator provenance (a JSONL `generator`)
    version: ClassVar[str] = "3"
    output_schema: ClassVar[pa.Schema] = schemas.RAW_DOCUMENTS
    # Large WARC/JSONL files are cut into parts at record boundaries, read by several tasks.
    splits_large_files: ClassVar[bool] = True

    max_document_bytes: int = 8 * 1024 * 1024
    # Where to reach S3-compatible stores; not part of the content key.
    s3_endpoint: str | None = field(default=None, compare=False)

    def scan(self, parts: pa.Table) -> list[PartScan]:
        """Number each part's items and list the hashes of the records it would keep."""
        return [
            with_retries(
                functools.partial(self._scan_part, part),
                what=f"reading {part['file_uri']}",
                must_exist=True,  # the landing manifest lists it
            )
            for part in parts.to_pylist()
        ]

    def _scan_part(self, part: dict[str, object]) -> PartScan:
        doc_ids: list[str] = []
        items: list[int] = []
        count = 0
        stats = ReadStats()
        for item in self._items(part, stats):
            count = item.index + 1
            if isinstance(item, ParsedRecord) and self._record_problem(item) is None:
                doc_ids.append(hashlib.sha256(item.content).hexdigest())
                items.append(item.index)
        candidates = pa.table(
            {"doc_id": doc_ids, "part": [part["part"]] * len(items), "item": items},
            schema=CANDIDATES,
        )
        return PartScan(int(part["part"]), count, stats.lines, candidates)  # type: ignore[call-overload]

    def read(self, parts: pa.Table, duplicates: Mapping[tuple[int, int], str]) -> StageResult:
        """Every record of `parts`: kept, or quarantined with a reason.

        `duplicates` maps (part, item within the part) to the record that was kept instead
        ("<batch>/<record id>"): those become `exact_duplicate` quarantine rows.
        """
        rows: list[dict[str, object]] = []
        rejects: list[dict[str, object]] = []
        for part in parts.to_pylist():
            # A part is read whole or retried whole: a transient failure halfway through never
            # leaves its rest unread or quarantined.
            part_rows, part_rejects = with_retries(
                functools.partial(self._read_part, part, duplicates),
                what=f"reading {part['file_uri']}",
                must_exist=True,
            )
            rows += part_rows
            rejects += part_rejects
        kept = pa.Table.from_pylist(rows, schema=self.output_schema)
        return StageResult(kept=kept, quarantined=quarantine_rows(rejects))

    def _read_part(
        self, part: dict[str, object], duplicates: Mapping[tuple[int, int], str]
    ) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        rows: list[dict[str, object]] = []
        rejects: list[dict[str, object]] = []
        for item in self._items(part):
            index = int(part["first_index"]) + item.index  # type: ignore[call-overload]
            record_id = record_id_for(str(part["file_sha256"]), index)
            if isinstance(item, UnreadableRecord):
                reason = _in_part(part, item.reason)
                rejects.append(
                    part_reject(part, record_id, None, item.raw_sha256, item.rule, reason)
                )
                continue
            sha = hashlib.sha256(item.content).hexdigest()
            problem = self._record_problem(item)
            original = duplicates.get((int(part["part"]), item.index))  # type: ignore[call-overload]
            if problem is None and original is not None:
                problem = ("exact_duplicate", f"same raw bytes as {original}")
            if problem is not None:
                rejects.append(part_reject(part, record_id, sha, sha, *problem))
            else:
                rows.append(_document(part, record_id, sha, item))
        return rows, rejects

    def process(self, batch: pa.Table) -> StageResult:
        """The records of `batch` (LANDED_PARTS) without deciding exact duplicates: the runner
        decides those across the whole batch and calls `read`."""
        return self.read(batch, {})

    def _items(
        self, part: dict[str, object], stats: ReadStats | None = None
    ) -> Iterator[ParsedRecord | UnreadableRecord]:
        """The part's items; `stats`, if given, gets the reader's line count at the end."""
        fs, path = filesystem_for(str(part["file_uri"]), self.s3_endpoint)
        start, end = int(part["start"]), int(part["end"])  # type: ignore[call-overload]
        with _open_part(fs, path, start, end) as stream:
            reader = FileRecordReader(
                str(part["file_name"]),
                cast(BinaryIO, stream),
                file_level_items=bool(part["whole_file"]),
            )
            yield from reader
        if stats is not None:
            stats.lines = reader.stats.lines
        if not part["whole_file"] and part["file_items"] == 0 and start == 0:
            # A split file with no document at all: its first part says so, once for the file.
            yield UnreadableRecord(
                0,
                Rule.NO_DOCUMENTS,
                "the archive holds no documents, only non-document records",
                None,
            )

    def _record_problem(self, item: ParsedRecord) -> tuple[str, str] | None:
        """Why a parsed record cannot be kept: its content, or a malformed JSONL generator."""
        problem = self._problem(item.content)
        if problem is None and item.generator is not None:
            try:
                Generator.from_json(item.generator, "the record's `generator`")
            except ValueError as exc:
                return (Rule.INVALID_GENERATOR, str(exc))
        return problem

    def _problem(self, content: bytes) -> tuple[str, str] | None:
        if not content.strip():
            return ("empty_record", "the record has no content (empty or only whitespace)")
        if len(content) > self.max_document_bytes:
            return (
                "document_too_large",
                f"{len(content):,} bytes exceeds max_document_bytes="
                f"{self.max_document_bytes:,} (FM_MAX_DOCUMENT_BYTES)",
            )
        return None


def _open_part(
    fs: pafs.FileSystem, path: str, start: int, end: int
) -> pafs.NativeFile | RangeReader:
    # compression=None: the parser sniffs gzip itself; pyarrow would guess from the extension and
    # fail on a damaged .gz before the parser could keep the readable records.
    if start == 0 and end < 0:
        return fs.open_input_stream(path, compression=None)
    return _ClosingRange(fs.open_input_file(path), start, end if end >= 0 else None)


class _ClosingRange(RangeReader):
    def __init__(self, source: pafs.NativeFile, start: int, end: int | None) -> None:
        super().__init__(source, start, end)  # type: ignore[arg-type]
        self._source = source

    def close(self) -> None:
        self._source.close()
        super().close()


def _in_part(part: dict[str, object], reason: str) -> str:
    """Reasons from a part of a split file locate it: offsets inside are relative to the part."""
    if part["whole_file"]:
        return reason
    return f"in the part of the file starting at byte {part['start']}: {reason}"


def part_reject(
    part: dict[str, object],
    record_id: str,
    doc_id: str | None,
    raw_sha256: str | None,
    rule: str,
    reason: str,
) -> dict[str, object]:
    """A quarantine row (QUARANTINED_RECORDS) of a record of a landed part."""
    return {
        "record_id": record_id,
        "doc_id": doc_id,
        "raw_sha256": raw_sha256,
        "source_file": part["file_name"],
        "rule": rule,
        "reason": reason,
    }


def _document(
    part: dict[str, object], record_id: str, sha: str, item: ParsedRecord
) -> dict[str, object]:
    return {
        "doc_id": sha,
        "raw_sha256": sha,
        "batch_id": part["batch_id"],
        "record_id": record_id,
        "source_file": part["file_name"],
        "source": part["source"],
        "license": part["license"],
        "namespace": part["namespace"],
        "url": item.url,
        "lang_hint": item.lang_hint,
        "external_id": item.external_id,
        # The record's own generator wins over its batch's (a batch may mix models).
        **generator_columns(
            Generator.from_json(item.generator)
            if item.generator is not None
            else Generator.from_json(str(part["generator"]))
            if part.get("generator")
            else None
        ),
        "content_type": item.content_type,
        "charset": item.charset,
        # Where the record is in the landed file: a part's offsets count from its start.
        "record_offset": None if item.offset is None else int(part["start"]) + item.offset,  # type: ignore[call-overload]
        "record_line": None if item.line is None else int(part["first_line"]) + item.line - 1,  # type: ignore[call-overload]
        "warc_record_id": item.warc_record_id,
        "raw_size": len(item.content),
        "raw_content": item.content,
    }
