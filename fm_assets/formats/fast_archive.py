"""WARC and WET archives -> documents: fastwarc finds the records, every record is checked.

fastwarc (Rust) splits the content into records and parses their WARC headers; warcio's own
code reads the HTTP headers and decodes the payload of document records, so a document has the
bytes the warcio reader (`archive.py`) gives it. fastwarc does not report all damage (a record
cut by the end of the data comes back short), so no record is used until the bytes it came from
prove it whole: plain ASCII WARC headers fastwarc read in full, exactly Content-Length bytes,
one blank line, then the next record or the clean end of the data. From the first record that
fails this (or that fastwarc cannot read) on, the warcio reader reads the rest of the file and
reports the damage with the rule and reason it always has; `ReadStats.warcio_from_record` says
where it took over.
"""

from __future__ import annotations

import dataclasses
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from fastwarc.warc import ArchiveIterator as FastIterator
from fastwarc.warc import WarcRecord as FastRecord
from warcio.limitreader import LimitReader  # type: ignore[import-untyped]
from warcio.recordloader import (  # type: ignore[import-untyped]
    ArcWarcRecord,
    ArcWarcRecordLoader,
)
from warcio.statusandheaders import StatusAndHeaders  # type: ignore[import-untyped]

from fm_assets.formats.archive import (
    header_values_problem,
    is_document_type,
    read_archive,
    record_label,
)
from fm_assets.formats.payload import Document, Rejection, read_document, unfinished_decoding
from fm_assets.formats.records import FileItem, ReadStats, RecordNumbering
from fm_assets.formats.streams import ContentStream, ResumedContent

# Record types whose handling both readers share; anything else goes to warcio.
_KNOWN_TYPES: Final = frozenset(
    {"warcinfo", "request", "response", "resource", "metadata", "revisit", "conversion"}
)
# A record is held in memory until it is proven whole: larger ones go to warcio, which streams.
_MAX_HELD_RECORD_BYTES: Final = 64 << 20
_END_OF_HEADERS: Final = b"\r\n\r\n"
_MAX_FIRST_LINE: Final = 8192
_CONTROL_BYTES: Final = re.compile(
    rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"
)  # fastwarc's readline limit
# warcio's record loader: its HTTP-header rules (which records have them, status-line checks)
# and its WARC-Target-URI clean-up are the ones the warcio reader applies.
_LOADER: Final = ArcWarcRecordLoader()
# The version lines warcio reads (it matches them as prefixes of the record's first line).
_WARC_VERSIONS: Final = tuple(v.encode() for v in _LOADER.WARC_TYPES)


@dataclass(frozen=True)
class _Pending:
    """A record fastwarc read whose bytes are not yet proven whole."""

    number: int
    start: int
    length: int  # its Content-Length
    header_count: int  # WARC header lines fastwarc read
    rec_type: str
    label: str  # names the record in reasons
    result: Document | Rejection | None  # None: not a document
    record_id: str | None = None  # its WARC-Record-ID


class _Window:
    """The content as fastwarc reads it, keeping every byte from `start` on."""

    def __init__(self, content: ContentStream) -> None:
        self._content = content
        self._kept = bytearray()
        self.start = 0
        self.end = 0  # bytes read so far
        self.source_error: OSError | None = None

    def read(self, size: int = -1) -> bytes:
        try:
            data = self._content.read(size)
        except OSError as exc:  # the source failed under fastwarc: re-raised by the reader
            self.source_error = exc
            raise
        self._kept += data
        self.end += len(data)
        return data

    def tell(self) -> int:
        return self.end

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Only to where the window stands: the content is read once, front to back."""
        if (offset, whence) not in ((self.end, io.SEEK_SET), (0, io.SEEK_CUR)):
            raise io.UnsupportedOperation("the content can only be read front to back")
        return self.end

    def close(self) -> None:
        """The content belongs to the caller: nothing to close."""

    def release(self, offset: int) -> None:
        """Forget the bytes before `offset`."""
        del self._kept[: offset - self.start]
        self.start = offset

    def kept_from(self, offset: int) -> bytes:
        return bytes(self._kept[offset - self.start :])

    def frames(self, start: int, end: int, length: int, header_count: int) -> bool:
        """True when [start, end) is exactly one clean record of `length` block bytes."""
        base = start - self.start
        headers_end = self._kept.find(_END_OF_HEADERS, base, end - self.start)
        if headers_end < 0:
            return False
        if end - start != headers_end - base + 4 + length + 4:
            return False
        if self._kept[end - self.start - 4 : end - self.start] != _END_OF_HEADERS:
            return False
        return _plain_headers(bytes(self._kept[base:headers_end]), header_count)


def _plain_headers(block: bytes, header_count: int) -> bool:
    """True for WARC headers both parsers read alike: ASCII, one `Name: value` per CRLF line.

    Both drop a line without a colon and trim the whitespace around names and values, but they
    join folded lines differently: such headers, and any fastwarc did not return one for, are
    left to warcio, as is a version line warcio would refuse (fastwarc reads any `WARC/`).
    """
    if not block.isascii() or _CONTROL_BYTES.search(block):
        return False
    if not block.startswith(_WARC_VERSIONS):
        return False
    lines = block.count(b"\r\n")
    if lines != header_count or block.count(b"\n") != lines or block.count(b"\r") != lines:
        return False
    return b"\n " not in block and b"\n\t" not in block


def _clean_target_uri(uri: str | None) -> str | None:
    """The WARC-Target-URI as warcio reads it: wget's angle brackets dropped, spaces escaped."""
    if uri is not None and uri.startswith("<") and uri.endswith(">"):
        uri = uri[1:-1]
    return uri.replace(" ", "%20") if uri is not None else None


def read_warc_fast(
    content: ContentStream,
    archive_format: str,
    numbering: RecordNumbering,
    stats: ReadStats,
    max_record_bytes: int,
) -> Iterator[FileItem]:
    """Yield the documents and unreadable records of a WARC or WET, as `read_archive` would."""
    yield from _FastReader(content, archive_format, numbering, stats, max_record_bytes).items()


class _HandOver(Exception):
    """fastwarc cannot vouch for the record at `start`: warcio reads on from there."""

    def __init__(self, start: int, number: int) -> None:
        super().__init__(start, number)
        self.start = start
        self.number = number


class _FastReader:
    def __init__(
        self,
        content: ContentStream,
        archive_format: str,
        numbering: RecordNumbering,
        stats: ReadStats,
        max_record_bytes: int,
    ) -> None:
        self._content = content
        self._format = archive_format
        self._numbering = numbering
        self._stats = stats
        self._max_record_bytes = max_record_bytes
        self._window = _Window(content)

    def items(self) -> Iterator[FileItem]:
        try:
            yield from self._proven_items()
        except _HandOver as handover:
            yield from self._warcio_from(handover.start, handover.number)

    def _proven_items(self) -> Iterator[FileItem]:
        """Yield each record once the next one (or the clean end) proves it whole."""
        pending: _Pending | None = None
        proven_end = 0  # where the last proven record ends
        number = 1  # of the next record
        records = self._records()
        while True:
            record = self._next(records, pending, proven_end, number)
            end = self._window.end if record is None else record.stream_pos
            if pending is not None:
                if not self._proves(pending, end, at_end=record is None):
                    raise _HandOver(pending.start, pending.number)
                yield from self._finish(pending)
                self._window.release(end)
                proven_end = end
            elif end != proven_end or (record is None and self._content.damage is not None):
                raise _HandOver(proven_end, number)  # bytes that fastwarc found no record in
            if record is None:
                return
            pending = self._pending(record, number)
            number += 1

    def _records(self) -> Iterator[FastRecord]:
        yield from FastIterator(self._window, parse_http=False, stream_detect=False)

    def _next(
        self, records: Iterator[FastRecord], pending: _Pending | None, proven_end: int, number: int
    ) -> FastRecord | None:
        """fastwarc's next record, None at the end; a hand-over when fastwarc fails."""
        try:
            return next(records, None)
        # pyo3 turns a panic inside fastwarc into a BaseException that is not an Exception.
        except BaseException as exc:
            if not isinstance(exc, Exception) and type(exc).__name__ != "PanicException":
                raise
            if self._window.source_error is not None:
                raise self._window.source_error from exc  # the source failed, not the data
            if pending is not None:
                raise _HandOver(pending.start, pending.number) from exc
            raise _HandOver(proven_end, number) from exc

    def _proves(self, pending: _Pending, end: int, *, at_end: bool) -> bool:
        if at_end and self._content.damage is not None:
            return False
        return self._window.frames(pending.start, end, pending.length, pending.header_count)

    def _pending(self, record: FastRecord, number: int) -> _Pending:
        """Read one record as the warcio reader would; a hand-over where they might differ."""
        start = record.stream_pos
        try:
            pending = self._read(record, number)
        except Exception as exc:  # warcio's HTTP parser, ... : warcio will say it again
            raise _HandOver(start, number) from exc
        if pending is None:
            raise _HandOver(start, number)
        return pending

    def _read(self, record: FastRecord, number: int) -> _Pending | None:
        # fastwarc's header lookups are warcio's: case-insensitive, the first of duplicates.
        headers = record.headers
        rec_type = headers.get("WARC-Type")
        length_value = headers.get("Content-Length")
        if header_values_problem(rec_type, length_value) or rec_type not in _KNOWN_TYPES:
            return None
        length = int(length_value or "")
        if length != record.content_length or length > _MAX_HELD_RECORD_BYTES:
            return None
        uri = _clean_target_uri(headers.get("WARC-Target-URI"))
        pending = _Pending(
            number,
            record.stream_pos,
            length,
            len(headers),
            rec_type,
            "",
            None,
            headers.get("WARC-Record-ID"),
        )
        if is_document_type(rec_type, uri):
            return self._document(record, pending)
        if length and rec_type in _LOADER.HTTP_RECORDS:
            # warcio parses these records' HTTP headers too, and stops the file when the status
            # line is not HTTP: only that line can make its parser fail.
            line = record.reader.readline(_MAX_FIRST_LINE)
            if len(line) >= _MAX_FIRST_LINE and not line.endswith(b"\n"):
                return None
            _LOADER.load_http_headers(rec_type, uri, io.BytesIO(line), length)
        return pending

    def _document(self, record: FastRecord, pending: _Pending) -> _Pending:
        """Read a document record's payload with warcio's HTTP parser and decoders."""
        headers = StatusAndHeaders("", list(record.headers.to_tuples()), protocol="WARC")
        uri = _LOADER._ensure_target_uri_format(headers)  # warcio's own clean-up of the URI
        stream = LimitReader(io.BytesIO(record.reader.read()), pending.length)
        http_headers = _LOADER.load_http_headers(pending.rec_type, uri, stream, pending.length)
        content_type = headers.get_header("Content-Type")
        document = ArcWarcRecord(
            "warc", pending.rec_type, headers, stream, http_headers, content_type, pending.length
        )
        where = self._content.where(pending.start)
        label = record_label(pending.number, document, where)
        result = read_document(document, label, self._max_record_bytes)
        return dataclasses.replace(pending, label=label, result=result)

    def _finish(self, pending: _Pending) -> Iterator[FileItem]:
        """The item of a proven record (none for a non-document: it is counted)."""
        result = pending.result
        if result is None:
            self._stats.skipped_by_type[pending.rec_type] += 1
            return
        if isinstance(result, Document) and not result.decoding_finished:
            result = unfinished_decoding(result, pending.label)
        if isinstance(result, Rejection):
            yield self._numbering.unreadable(result.rule, result.reason)
            return
        yield self._numbering.parsed(
            content=result.content,
            content_type=result.content_type,
            url=result.url,
            charset=result.charset,
            offset=self._content.origin(pending.start),
            warc_record_id=pending.record_id,
        )

    def _warcio_from(self, start: int, number: int) -> Iterator[FileItem]:
        """The warcio reader's items for the content from `start` (record `number`) on."""
        self._stats.warcio_from_record = number
        resumed = ResumedContent(self._window.kept_from(start), start, self._content)
        yield from read_archive(
            resumed,
            self._format,
            self._numbering,
            self._stats,
            self._max_record_bytes,
            first_record_number=number,
        )
