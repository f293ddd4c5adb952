"""One landed file -> its items: sniff the format, then hand the content to the right reader."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO, Final

from fm_assets.formats.archive import read_archive
from fm_assets.formats.fast_archive import read_warc_fast
from fm_assets.formats.jsonl import read_jsonl
from fm_assets.formats.records import FileItem, ReadStats, RecordNumbering, Rule
from fm_assets.formats.sniff import (
    ARCHIVE_FORMATS,
    SNIFF_BYTES,
    Sniffed,
    binary_signature,
    classify,
    gunzip_prefix,
    is_gzip,
)
from fm_assets.formats.streams import ContentStream, read_head
from fm_assets.formats.whole_file import read_whole_file

# A bound on one document (HTTP body, JSONL line, whole file) so hostile input cannot exhaust
# memory; far above any real web page, and above the 50 MB lines some corpora have.
DEFAULT_MAX_RECORD_BYTES: Final = 256 * 1024 * 1024
_ARCHIVE_HEAD_BYTES: Final = 256
WARC_PARSERS: Final = ("fastwarc", "warcio")


class FileRecordReader:
    """Reads one landed file as ParsedRecord / UnreadableRecord items, and counts what it skipped.

    Iterate it once. Every file yields at least one item, numbered 0, 1, 2, ... across parsed and
    unreadable items. Archive records that are not documents (warcinfo, request, metadata,
    revisit, crawler logs) yield nothing; after iterating, `skipped_non_documents` says how many
    there were and `stats.skipped_by_type` how many of each WARC-Type. `format` is the format
    the file was read as. The stream is read sequentially and never closed.

    WARC and WET files are read with fastwarc, handing over to warcio at the first record it
    cannot vouch for (`stats.warcio_from_record`); ARC files with warcio. Both give the same
    items; `warc_parser="warcio"` reads WARC and WET with warcio alone (for comparisons).
    """

    def __init__(
        self,
        filename: str,
        stream: BinaryIO,
        *,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        warc_parser: str = "fastwarc",
        file_level_items: bool = True,
    ) -> None:
        """`file_level_items=False` reads a part of a split file: an archive part holding only
        non-document records then yields nothing, since the file as a whole may hold documents."""
        if warc_parser not in WARC_PARSERS:
            raise ValueError(f"warc_parser must be one of {WARC_PARSERS}, not {warc_parser!r}")
        self.filename = filename
        self.warc_parser = warc_parser
        self._file_level_items = file_level_items
        self.format: str | None = None
        self.stats = ReadStats()
        self._stream = stream
        self._max_record_bytes = max_record_bytes
        self._started = False

    @property
    def skipped_non_documents(self) -> int:
        """How many archive records were skipped as non-documents (so far)."""
        return self.stats.skipped_non_documents

    def __iter__(self) -> Iterator[FileItem]:
        if self._started:
            raise RuntimeError(
                f"{self.filename}: a FileRecordReader reads its stream once; "
                "open the file again and create a new reader"
            )
        self._started = True
        return self._items()

    def _items(self) -> Iterator[FileItem]:
        numbering = RecordNumbering()
        yield from self._read(numbering)
        if numbering.count == 0 and self._file_level_items:
            # Only an archive of non-document records gets here.
            yield numbering.unreadable(Rule.NO_DOCUMENTS, self._no_documents_reason())

    def _read(self, numbering: RecordNumbering) -> Iterator[FileItem]:
        head = read_head(self._stream, SNIFF_BYTES)
        if not head:
            yield numbering.unreadable(Rule.EMPTY_FILE, "the file is empty (0 bytes)")
            return
        gzipped = is_gzip(head)
        sample = gunzip_prefix(head) if gzipped else head
        sniffed = classify(self.filename, sample)
        self.format = sniffed.format
        content = ContentStream(head, self._stream, gzipped=gzipped)
        problem = self._file_problem(sniffed, sample, content)
        if problem is not None:
            yield numbering.unreadable(*problem)
            return
        limit = self._max_record_bytes
        if sniffed.format in ARCHIVE_FORMATS:
            fast = sniffed.format != "arc" and self.warc_parser == "fastwarc"
            read = read_warc_fast if fast else read_archive
            yield from read(content, sniffed.format, numbering, self.stats, limit)
        elif sniffed.format == "jsonl":
            yield from read_jsonl(content, numbering, self.stats, limit)
        else:
            yield from read_whole_file(content, sniffed.format, numbering, limit)

    def _file_problem(
        self, sniffed: Sniffed, sample: bytes, content: ContentStream
    ) -> tuple[str, str] | None:
        """(rule, reason) when the whole file is unreadable before any record is looked at."""
        if content.gzipped and not sample and content.at_end():
            return _gzip_without_content(sniffed, content)
        compressed = " (after gunzip)" if content.gzipped else ""
        is_archive = sniffed.format in ARCHIVE_FORMATS
        if not (is_archive and sniffed.by_content):
            # Archive payloads may be binary: a file named like one is only judged by its start,
            # where the first record's text headers belong.
            binary = binary_signature(sample[:_ARCHIVE_HEAD_BYTES] if is_archive else sample)
            if binary is not None:
                return Rule.BINARY_FILE, f"the file{compressed} {binary}"
        if sniffed.format == "unknown":
            reason = (
                f"{self.filename!r} has no supported extension (.warc, .arc, .wet, .jsonl, "
                f".json, .html, .htm, .txt, optionally .gz) and its content{compressed} is not "
                f"recognisable; it starts with {sample[:40]!r}"
            )
            return Rule.UNKNOWN_FORMAT, reason
        return None

    def _no_documents_reason(self) -> str:
        skipped = self.stats.skipped_by_type
        if not skipped:
            return f"the {self.format} file holds no records"
        counts = ", ".join(f"{count} {kind}" for kind, count in sorted(skipped.items()))
        return f"the {self.format} file holds no documents, only non-document records ({counts})"


def _gzip_without_content(sniffed: Sniffed, content: ContentStream) -> tuple[str, str]:
    """(rule, reason) for a gzip file that decompresses to nothing: empty, cut or corrupt."""
    damage = content.damage
    if damage is None:
        return Rule.EMPTY_FILE, "the gzip stream decompresses to 0 bytes"
    if not damage.truncated:
        rule = Rule.CORRUPT_GZIP
    elif sniffed.format in ARCHIVE_FORMATS:
        rule = Rule.TRUNCATED_ARCHIVE
    else:
        rule = Rule.TRUNCATED_FILE
    return rule, f"nothing could be decompressed: {damage.detail}"


def iter_file_records(filename: str, stream: BinaryIO) -> Iterator[FileItem]:
    """Yield the documents and unreadable records of one landed file, in file order.

    Never raises on bad input: anything unreadable becomes an UnreadableRecord saying why and
    where. Use `FileRecordReader` directly to also learn how many non-document archive records
    were skipped.
    """
    return iter(FileRecordReader(filename, stream))
