"""What a landed file turns into: parsed documents, unreadable records, and their numbering."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Final


@dataclass(frozen=True)
class ParsedRecord:
    """One document found in a landed file, with its raw (undecoded) payload."""

    index: int  # 0-based position among all items (parsed or unreadable) of the file
    content: bytes  # HTTP body (de-chunked, content-decoded), WET text, JSONL field, whole file
    content_type: str  # "html" or "text"
    url: str | None
    charset: str | None  # declared by the HTTP Content-Type header or <meta>, lower-case
    lang_hint: str | None  # JSONL `lang`
    external_id: str | None  # JSONL `id`, as a string
    # Where the record starts in what the reader was given (`ContentStream.origin`): the byte
    # offset of the record, or for gzip data of the gzip member holding its first byte.
    offset: int | None = None
    line: int | None = None  # JSONL: the 1-based line number within what the reader was given
    warc_record_id: str | None = None  # WARC: the record's WARC-Record-ID header
    generator: str | None = None  # JSONL `generator`, as JSON text (the raw stage checks it)


@dataclass(frozen=True)
class UnreadableRecord:
    """A record (or a whole file) that could not be turned into a document, and why."""

    index: int  # same numbering as ParsedRecord
    rule: str  # one of the `Rule` codes
    reason: str  # what was wrong and where (record number, byte offset or line number)
    raw_sha256: str | None  # sha256 hex of the offending bytes when they can be isolated


FileItem = ParsedRecord | UnreadableRecord


class Rule:
    """The codes `UnreadableRecord.rule` takes."""

    EMPTY_FILE: Final = "empty_file"
    BINARY_FILE: Final = "binary_file"  # not text and not a recognised archive
    UNKNOWN_FORMAT: Final = "unknown_format"  # text, but no format recognised
    CORRUPT_GZIP: Final = "corrupt_gzip"  # gzip data that does not decompress
    TRUNCATED_FILE: Final = "truncated_file"  # a gzipped JSONL/HTML/text file cut short
    TRUNCATED_ARCHIVE: Final = "truncated_archive"  # WARC/ARC data ends inside a record
    INVALID_WARC_RECORD: Final = "invalid_warc_record"  # unparseable or mis-framed record
    UNSUPPORTED_CONTENT_TYPE: Final = "unsupported_content_type"  # images, PDF, JS, CSS, ...
    BINARY_CONTENT: Final = "binary_content"  # declared HTML/text, but the bytes are binary
    CORRUPT_CONTENT_ENCODING: Final = "corrupt_content_encoding"  # gzip/deflate/br body broken
    NO_DOCUMENTS: Final = "no_documents"  # an archive holding only non-document records
    INVALID_UTF8: Final = "invalid_utf8"
    INVALID_JSON: Final = "invalid_json"
    MISSING_TEXT_FIELD: Final = "missing_text_field"
    RECORD_TOO_LARGE: Final = "record_too_large"
    INVALID_GENERATOR: Final = "invalid_generator"  # a JSONL `generator` lacking its fields


@dataclass
class ReadStats:
    """What a file held besides its items: archive records skipped as non-documents, and which
    parser read it."""

    skipped_by_type: Counter[str] = field(default_factory=Counter)  # WARC-Type -> count
    # WARC/WET read with fastwarc: the record from which the warcio reader read on (damage, or
    # a record fastwarc could not vouch for); None when fastwarc read the whole file.
    warcio_from_record: int | None = None
    lines: int = 0  # JSONL: physical lines read (a split file numbers its parts' lines on)

    @property
    def skipped_non_documents(self) -> int:
        """How many archive records were skipped because they are not documents."""
        return sum(self.skipped_by_type.values())


class RecordNumbering:
    """Builds the items of one file, numbering them 0, 1, 2, ... in creation order.

    Every item goes through here so parsed and unreadable items share one contiguous sequence.
    """

    def __init__(self) -> None:
        self.count = 0

    def parsed(
        self,
        *,
        content: bytes,
        content_type: str,
        url: str | None = None,
        charset: str | None = None,
        lang_hint: str | None = None,
        external_id: str | None = None,
        offset: int | None = None,
        line: int | None = None,
        warc_record_id: str | None = None,
        generator: str | None = None,
    ) -> ParsedRecord:
        """Return the next item as a ParsedRecord."""
        record = ParsedRecord(
            index=self.count,
            content=content,
            content_type=content_type,
            url=url,
            charset=charset,
            lang_hint=lang_hint,
            external_id=external_id,
            offset=offset,
            line=line,
            warc_record_id=warc_record_id,
            generator=generator,
        )
        self.count += 1
        return record

    def unreadable(self, rule: str, reason: str, raw_sha256: str | None = None) -> UnreadableRecord:
        """Return the next item as an UnreadableRecord."""
        record = UnreadableRecord(index=self.count, rule=rule, reason=reason, raw_sha256=raw_sha256)
        self.count += 1
        return record
