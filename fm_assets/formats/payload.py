"""The payload of one archive record: document type, decoded body and declared charset."""

from __future__ import annotations

from dataclasses import dataclass

from warcio.bufferedreaders import (  # type: ignore[import-untyped]
    BufferedReader,
    ChunkedDataReader,
)
from warcio.recordloader import ArcWarcRecord  # type: ignore[import-untyped]

from fm_assets.formats.records import Rule
from fm_assets.formats.sniff import (
    HTML_MEDIA_TYPES,
    TEXT_MEDIA_TYPES,
    binary_signature,
    charset_from_content_type,
    charset_from_meta,
    looks_like_html,
    media_type,
)


@dataclass(frozen=True)
class Document:
    """A record's payload as a document."""

    content: bytes
    content_type: str  # "html" or "text"
    url: str | None
    charset: str | None
    content_encoding: str | None  # HTTP Content-Encoding the payload was decoded from
    # False when the decoder stopped before the end of the compressed data (and the crawler did
    # not declare a WARC-Truncated payload): the content may be cut.
    decoding_finished: bool


@dataclass(frozen=True)
class _Body:
    data: bytes
    decoding_finished: bool


@dataclass(frozen=True)
class Rejection:
    """Why a document record's payload is not a usable document."""

    rule: str
    reason: str


def read_document(record: ArcWarcRecord, label: str, max_record_bytes: int) -> Document | Rejection:
    """Read a document record's payload (de-chunked, content-decoded) and classify it.

    Only HTML and plain-text payloads are read: other types are rejected from their headers.
    """
    header = _content_type_header(record)
    declared = media_type(header)
    content_type = _document_type(declared)
    if content_type is None and declared:
        reason = f"{label}: content type {declared!r} is neither HTML nor plain text"
        return Rejection(Rule.UNSUPPORTED_CONTENT_TYPE, reason)
    read = _read_body(record, label, max_record_bytes)
    if isinstance(read, Rejection):
        return read
    body = read.data
    if content_type is None:
        if not looks_like_html(body):
            reason = f"{label}: no Content-Type, and the payload does not start like HTML"
            return Rejection(Rule.UNSUPPORTED_CONTENT_TYPE, reason)
        content_type = "html"
    encoding = _content_encoding(record)
    binary = binary_signature(body)
    if binary is not None:
        encoded = f" with Content-Encoding {encoding!r}" if encoding else ""
        reason = f"{label}: declared {declared or 'no type'}{encoded}, but the payload {binary}"
        return Rejection(Rule.BINARY_CONTENT, reason)
    charset = charset_from_content_type(header)
    if charset is None and content_type == "html":
        charset = charset_from_meta(body)
    return Document(
        content=body,
        content_type=content_type,
        url=target_uri(record),
        charset=charset,
        content_encoding=encoding,
        decoding_finished=read.decoding_finished,
    )


def unfinished_decoding(document: Document, label: str) -> Rejection:
    """The rejection of a document whose Content-Encoding stopped short, with no known cause."""
    reason = (
        f"{label}: its {document.content_encoding} body stops before the end of the compressed "
        f"data, so the page is cut or corrupt"
    )
    return Rejection(Rule.CORRUPT_CONTENT_ENCODING, reason)


def target_uri(record: ArcWarcRecord) -> str | None:
    """The record's WARC-Target-URI (ARC: its URL), None when absent or empty."""
    url = record.rec_headers.get_header("WARC-Target-URI")
    return url if isinstance(url, str) and url else None


def _content_type_header(record: ArcWarcRecord) -> str | None:
    """The HTTP Content-Type of a response; the record's own Content-Type otherwise."""
    if record.rec_type == "response" and record.http_headers is not None:
        value = record.http_headers.get_header("Content-Type")
    else:
        value = record.content_type
    return value if isinstance(value, str) else None


def _document_type(declared: str) -> str | None:
    if declared in HTML_MEDIA_TYPES:
        return "html"
    if declared in TEXT_MEDIA_TYPES:
        return "text"
    return None


def _content_encoding(record: ArcWarcRecord) -> str | None:
    """The lower-case HTTP Content-Encoding, None when absent."""
    if record.http_headers is None:
        return None
    encoding = record.http_headers.get_header("Content-Encoding")
    if not isinstance(encoding, str) or not encoding.strip():
        return None
    return encoding.strip().lower()


def _read_body(record: ArcWarcRecord, label: str, max_record_bytes: int) -> _Body | Rejection:
    """The payload after de-chunking and content decoding, at most `max_record_bytes`."""
    encoding = _content_encoding(record)
    if encoding == "br":
        return _read_brotli_body(record, label, max_record_bytes)
    try:
        stream = record.content_stream()
        body: bytes = stream.read(max_record_bytes + 1)
    except OSError:
        raise  # the source failed, not the data
    except Exception as exc:  # warcio's decoders raise anything from zlib.error to AttributeError
        reason = f"{label}: its {encoding} body cannot be decoded ({type(exc).__name__}: {exc})"
        return Rejection(Rule.CORRUPT_CONTENT_ENCODING, reason)
    if len(body) > max_record_bytes:
        return _too_large(label, max_record_bytes)
    unfinished = bool(body) and _decoding_unfinished(stream)
    return _Body(body, decoding_finished=not unfinished or _truncated_by_crawler(record))


def _read_brotli_body(
    record: ArcWarcRecord, label: str, max_record_bytes: int
) -> _Body | Rejection:
    """Decode a `br` body here: warcio 1.8's brotli hook fails with the `brotli` package."""
    try:
        import brotli  # type: ignore[import-untyped]  # comes with mosaicml-streaming
    except ImportError:
        reason = f"{label}: its body is br-compressed and the brotli package is not installed"
        return Rejection(Rule.CORRUPT_CONTENT_ENCODING, reason)
    chunked = record.http_headers.get_header("Transfer-Encoding") == "chunked"
    stream = ChunkedDataReader(record.raw_stream) if chunked else record.raw_stream
    decompressor = brotli.Decompressor()
    try:
        body: bytes = decompressor.process(
            stream.read(max_record_bytes + 1), output_buffer_limit=max_record_bytes + 1
        )
    except brotli.error as exc:
        return Rejection(Rule.CORRUPT_CONTENT_ENCODING, f"{label}: its br body is corrupt: {exc}")
    if len(body) > max_record_bytes:
        return _too_large(label, max_record_bytes)
    finished = decompressor.is_finished() or _truncated_by_crawler(record)
    return _Body(body, decoding_finished=finished)


def _too_large(label: str, max_record_bytes: int) -> Rejection:
    reason = f"{label}: its payload is over the {max_record_bytes}-byte record limit"
    return Rejection(Rule.RECORD_TOO_LARGE, reason)


def _decoding_unfinished(stream: object) -> bool:
    """True when a content-decoding stream stopped before the end of the compressed data.

    warcio logs a mid-stream decompression error to stderr and returns what it had; the
    decompressor not reaching its end is how that (and a cut body) shows.
    """
    if not isinstance(stream, BufferedReader) or stream.decompressor is None:
        return False
    return not getattr(stream.decompressor, "eof", True)


def _truncated_by_crawler(record: ArcWarcRecord) -> bool:
    """True when the crawler declared it stored only part of the payload (WARC-Truncated)."""
    return bool(record.rec_headers.get_header("WARC-Truncated"))
