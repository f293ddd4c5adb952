"""WARC (0.18 to 1.1, WET included) and legacy ARC archives -> documents, read with warcio.

The reference reader: ARC files are read here, and every WARC or WET from the first record the
fastwarc reader (`fast_archive.py`) cannot vouch for. Per record: `response`, `resource` and
`conversion` records are documents when their HTTP (or record) Content-Type is HTML or plain
text; every other record type is counted in `ReadStats` and skipped. After each record warcio is
made to read to its end, so a record cut off by the end of the data or followed by stray bytes
is caught before it is yielded.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from warcio.archiveiterator import (  # type: ignore[import-untyped]
    ArchiveIterator,
    WARCIterator,
)
from warcio.limitreader import LimitReader  # type: ignore[import-untyped]
from warcio.recordloader import ArcWarcRecord  # type: ignore[import-untyped]

from fm_assets.formats.payload import (
    Document,
    Rejection,
    read_document,
    target_uri,
    unfinished_decoding,
)
from fm_assets.formats.records import FileItem, ReadStats, RecordNumbering, Rule
from fm_assets.formats.streams import ContentStream

DOCUMENT_RECORD_TYPES: Final = frozenset({"response", "resource", "conversion"})
# Records about the crawl, not crawled content: wget stores its command line and log as
# `resource` records under metadata://, Heritrix its DNS lookups as `response` records under dns:.
_BOOKKEEPING_URI_PREFIXES: Final = ("metadata:", "dns:")
_MAX_URL_IN_REASON: Final = 200
_DRAIN_CHUNK: Final = 1 << 16


@dataclass(frozen=True)
class _Outcome:
    """What one archive record gave: its items (none when skipped), and whether reading stops."""

    items: tuple[FileItem, ...] = ()
    stop: bool = False


def read_archive(
    content: ContentStream,
    archive_format: str,
    numbering: RecordNumbering,
    stats: ReadStats,
    max_record_bytes: int,
    first_record_number: int = 1,
) -> Iterator[FileItem]:
    """Yield the documents and unreadable records of a WARC, WET or ARC (`archive_format`).

    `first_record_number` is the number, in reasons, of the first record `content` holds (a
    reader taking over mid-file passes the number of the record it hands over).
    """
    # ARC records are converted to WARC ones. A WARC is parsed strictly as WARC: warcio would
    # otherwise take any stray line of five words for an ARC record header.
    if archive_format == "arc":
        iterator = ArchiveIterator(content, arc2warc=True)
    else:
        iterator = WARCIterator(content)
    reader = _ArchiveReader(content, iterator, numbering, stats, max_record_bytes)
    # warcio makes up a WARC-Record-ID for each converted ARC record: not the file's own.
    reader.keeps_record_ids = archive_format != "arc"
    reader.set_first_record_number(first_record_number)
    yield from reader.items()


class _ArchiveReader:
    """Walks warcio's records and turns each into at most one item."""

    def __init__(
        self,
        content: ContentStream,
        iterator: ArchiveIterator,
        numbering: RecordNumbering,
        stats: ReadStats,
        max_record_bytes: int,
    ) -> None:
        self._content = content
        self._iterator = iterator
        self._numbering = numbering
        self._stats = stats
        self._max_record_bytes = max_record_bytes
        self._record_number = 0  # of the record being read, from 1
        self.keeps_record_ids = True  # whether records' WARC-Record-IDs are the file's own

    def set_first_record_number(self, number: int) -> None:
        """Number the first record `number` (in reasons) instead of 1."""
        self._record_number = number - 1

    def items(self) -> Iterator[FileItem]:
        """Yield items until the data ends or can no longer be parsed."""
        while True:
            start = self._iterator.offset
            self._record_number += 1
            try:
                outcome = self._read_record(start)
            except OSError:
                raise  # the source failed (network, disk): not bad data, let the caller retry
            # warcio raises ArchiveLoadFailed, ValueError, UnicodeError, ... on bad bytes.
            except Exception as exc:
                yield self._stop_item(Rule.INVALID_WARC_RECORD, self._unparseable(start, exc))
                return
            if outcome is None:
                break
            yield from outcome.items
            if outcome.stop:
                return
        yield from self._end_of_data()

    def _read_record(self, start: int) -> _Outcome | None:
        """Parse and process the next record; None at the end of the data."""
        record = next(self._iterator, None)
        return None if record is None else self._process(record, start)

    def _process(self, record: ArcWarcRecord, start: int) -> _Outcome:
        """Read one record to its end and decide what it yields."""
        label = record_label(self._record_number, record, self._content.where(start))
        problem = header_problem(record)
        if problem:
            reason = f"{label} {problem}, so the records after it cannot be located"
            return _Outcome((self._stop_item(Rule.INVALID_WARC_RECORD, reason),), stop=True)
        errors_before = self._iterator.err_count
        result = None
        if is_document_record(record):
            result = read_document(record, label, self._max_record_bytes)
        block_end = self._drain(record)
        self._iterator.read_to_end()  # consumes the blank lines after it, counts stray bytes
        missing = _missing_bytes(record)
        if missing:
            length = record.rec_headers.get_header("Content-Length")
            reason = f"{label} is cut off: {missing} of its {length} bytes are missing"
            return _Outcome((self._stop_item(Rule.TRUNCATED_ARCHIVE, reason),), stop=True)
        misframed = self._iterator.err_count > errors_before
        items: list[FileItem] = []
        if result is None:
            self._stats.skipped_by_type[record.rec_type] += 1
        else:
            record_id = record.rec_headers.get_header("WARC-Record-ID")
            where = (self._content.origin(start), record_id if self.keeps_record_ids else None)
            items.append(self._item(result, label, misframed, where))
        if misframed:
            items.append(self._misframed(record, label, block_end))
        return _Outcome(tuple(items))

    def _item(
        self,
        result: Document | Rejection,
        label: str,
        misframed: bool,
        where: tuple[int, str | None],
    ) -> FileItem:
        """The record's item; `where` is its origin offset and WARC-Record-ID."""
        if isinstance(result, Document) and not result.decoding_finished and not misframed:
            result = unfinished_decoding(result, label)
        if isinstance(result, Rejection):
            return self._numbering.unreadable(result.rule, result.reason)
        # A misframed record's body was cut by its wrong Content-Length, not corrupted: keep
        # what decoded; the item that follows it reports the framing.
        return self._numbering.parsed(
            content=result.content,
            content_type=result.content_type,
            url=result.url,
            charset=result.charset,
            offset=where[0],
            warc_record_id=where[1],
        )

    def _drain(self, record: ArcWarcRecord) -> int:
        """Read the rest of the record's block; return the content offset just past it."""
        while record.raw_stream.read(_DRAIN_CHUNK):
            pass
        return int(self._content.tell() - self._iterator.reader.rem_length())

    def _misframed(self, record: ArcWarcRecord, label: str, block_end: int) -> FileItem:
        length = record.rec_headers.get_header("Content-Length")
        reason = (
            f"{label} declares Content-Length {length}, but stray bytes, not the blank line that "
            f"ends a record, follow it at {self._content.where(block_end)}: the length is "
            f"probably wrong, so the record may be incomplete; the stray line was skipped"
        )
        return self._numbering.unreadable(Rule.INVALID_WARC_RECORD, reason)

    def _end_of_data(self) -> Iterator[FileItem]:
        """After the last record: report bytes that formed no record, or damaged compression."""
        leftover = self._content.tell() - self._iterator.offset
        if leftover > 0:
            where = self._content.where(self._iterator.offset)
            reason = (
                f"the data ends inside the headers of record #{self._record_number} at "
                f"{where} ({leftover} bytes of it were read)"
            )
            yield self._stop_item(Rule.TRUNCATED_ARCHIVE, reason)
        elif self._content.damage is not None:
            where = self._content.where(self._content.tell())
            reason = f"reading stopped after record #{self._record_number - 1} at {where}"
            yield self._stop_item(Rule.TRUNCATED_ARCHIVE, reason)

    def _stop_item(self, rule: str, reason: str) -> FileItem:
        """The last item of a file whose reading stops; a cut-off file explains most stops."""
        ended = self._data_ended()
        # Nothing reads on after a stop. Read the rest now, so that whether the compressed data
        # is damaged is known whatever a parser had read ahead (fastwarc reads 64 KB at a time,
        # warcio 16 KB): the rule must not depend on it.
        while self._content.read(_DRAIN_CHUNK):
            pass
        damage = self._content.damage
        if damage is not None:
            rule = Rule.TRUNCATED_ARCHIVE if damage.truncated else Rule.CORRUPT_GZIP
            reason = f"{reason}: {damage.detail}"
        elif rule != Rule.TRUNCATED_ARCHIVE and ended:
            rule = Rule.TRUNCATED_ARCHIVE
            reason = f"{reason}; the file ends within this record, so it was probably cut short"
        return self._numbering.unreadable(rule, reason)

    def _data_ended(self) -> bool:
        """True when every byte of the content has been consumed."""
        reader = self._iterator.reader
        buffered = reader.rem_length() if reader is not None else 0
        return buffered == 0 and self._content.at_end()

    def _unparseable(self, start: int, exc: Exception) -> str:
        message = " ".join(str(exc).split())  # warcio's messages span several indented lines
        return (
            f"record #{self._record_number} at {self._content.where(start)} cannot be parsed "
            f"({type(exc).__name__}: {message}); the rest of the file is unreadable"
        )


def record_label(number: int, record: ArcWarcRecord, where: str) -> str:
    """`record #3 (response http://example.com/) at byte 1197`, for reasons."""
    url = target_uri(record)
    kind = record.rec_type or "no WARC-Type"
    what = f"{kind} {url[:_MAX_URL_IN_REASON]}" if url else kind
    return f"record #{number} ({what}) at {where}"


def is_document_record(record: ArcWarcRecord) -> bool:
    """True for a record whose payload may be a document (not crawl bookkeeping)."""
    return is_document_type(record.rec_type, target_uri(record))


def is_document_type(rec_type: str | None, url: str | None) -> bool:
    """True for a record of this WARC-Type and target URI that may hold a document."""
    if rec_type not in DOCUMENT_RECORD_TYPES:
        return False
    return not (url or "").lower().startswith(_BOOKKEEPING_URI_PREFIXES)


def header_problem(record: ArcWarcRecord) -> str | None:
    """What makes a record's headers unusable, or None."""
    length = record.rec_headers.get_header("Content-Length")
    return header_values_problem(record.rec_type, length)


def header_values_problem(rec_type: str | None, length: str | None) -> str | None:
    """What makes a record with this WARC-Type and Content-Length unusable, or None."""
    if not rec_type:
        return "has no WARC-Type header"
    if length is None:
        return "has no Content-Length header"
    if not length.strip().isdigit():
        return f"has an invalid Content-Length {length!r}"
    return None


def _missing_bytes(record: ArcWarcRecord) -> int:
    """How many bytes of the record's declared length the data did not hold (after draining)."""
    stream = record.raw_stream
    return stream.limit if isinstance(stream, LimitReader) else 0
