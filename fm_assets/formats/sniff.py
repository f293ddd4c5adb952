"""Recognising a file's format and reading declared charsets, from a few leading bytes."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Final

SNIFF_BYTES: Final = 64 * 1024  # how much of a file (and of its decompressed content) is sniffed
GZIP_MAGIC: Final = b"\x1f\x8b"
ARCHIVE_FORMATS: Final = frozenset({"warc", "arc", "wet"})
HTML_MEDIA_TYPES: Final = frozenset({"text/html", "application/xhtml+xml"})
TEXT_MEDIA_TYPES: Final = frozenset({"text/plain"})

_EXTENSION_FORMATS: Final = {
    ".warc": "warc",
    ".wat": "warc",  # WAT files are WARCs of metadata records
    ".wet": "wet",
    ".arc": "arc",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".txt": "text",
}
_COMPRESSION_SUFFIXES: Final = (".gz", ".gzip")
_UTF8_BOM: Final = b"\xef\xbb\xbf"
_BOM_CHARSETS: Final = (  # longest first: the UTF-32 LE BOM starts with the UTF-16 LE one
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (_UTF8_BOM, "utf-8"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
)
_BINARY_SIGNATURES: Final = (
    (b"\x89PNG", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF8", "GIF image"),
    (b"RIFF", "RIFF media (WebP, WAV, AVI)"),
    (b"%PDF-", "PDF document"),
    (b"PK\x03\x04", "zip archive (or docx/xlsx/jar)"),
    (b"\x7fELF", "ELF executable"),
    (b"BZh", "bzip2 data (only gzip compression is supported)"),
    (b"\xfd7zXZ\x00", "xz data (only gzip compression is supported)"),
    (b"\x28\xb5\x2f\xfd", "zstd data (only gzip compression is supported)"),
    (b"7z\xbc\xaf\x27\x1c", "7-zip archive"),
)
# Control bytes that never occur in text in any common 8-bit or multi-byte encoding; tab,
# newlines, form feed, backspace and ESC (ISO-2022-JP) are allowed.
_CONTROL_BYTES: Final = bytes(b for b in range(32) if b not in b"\t\n\r\f\b\x1b") + b"\x7f"
_MAX_CONTROL_RATIO: Final = 0.02
_BINARY_SAMPLE_BYTES: Final = 8192
_META_CHARSET_BYTES: Final = 2048
_META_CHARSET: Final = re.compile(
    rb"""<meta[^>]*?charset\s*=\s*["']?\s*([a-z0-9][a-z0-9_.:+-]*)""", re.IGNORECASE
)
_HTML_STARTS: Final = (b"<!doctype html", b"<html", b"<head", b"<body", b"<meta")


@dataclass(frozen=True)
class Sniffed:
    """A file's format, and whether its content (not just its name) proved it."""

    format: str  # "warc", "arc", "wet", "jsonl", "html", "text" or "unknown"
    by_content: bool


def detect_format(filename: str, head: bytes) -> str:
    """Return the format of a file from its name and first bytes (compressed or not).

    Content signatures win (gzip magic, then `WARC/`, ARC `filedesc://`); the extension (without
    `.gz`) decides next; then a first `{` means JSONL and a leading HTML tag means HTML.
    Returns "warc", "arc", "wet", "jsonl", "html", "text" or "unknown".
    """
    content = gunzip_prefix(head) if is_gzip(head) else head
    return classify(filename, content).format


def is_gzip(head: bytes) -> bool:
    """True when the bytes start with the gzip magic number."""
    return head.startswith(GZIP_MAGIC)


def gunzip_prefix(head: bytes, limit: int = SNIFF_BYTES) -> bytes:
    """Decompress what can be decompressed of the start of a (multi-member) gzip stream.

    Tolerant: a cut or corrupt stream yields what came before the damage, possibly nothing.
    """
    out = bytearray()
    data = head
    while data and len(out) < limit:
        decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out += decompressor.decompress(data, limit - len(out))
        except zlib.error:
            break
        if not decompressor.eof:
            break
        data = decompressor.unused_data.lstrip(b"\x00")  # zero padding between members
    return bytes(out)


def classify(filename: str, content: bytes) -> Sniffed:
    """Return the format of a file from its name and first decompressed bytes."""
    stripped = content.lstrip()
    by_name = _EXTENSION_FORMATS.get(_extension(filename))
    if stripped.startswith(b"WARC/"):
        is_wet = by_name == "wet" or b"WARC-Type: conversion" in content
        return Sniffed("wet" if is_wet else "warc", by_content=True)
    if stripped.startswith(b"filedesc://"):
        return Sniffed("arc", by_content=True)
    if by_name is not None:
        return Sniffed(by_name, by_content=False)
    if stripped.removeprefix(_UTF8_BOM).lstrip().startswith(b"{"):
        return Sniffed("jsonl", by_content=True)
    if looks_like_html(content):
        return Sniffed("html", by_content=True)
    return Sniffed("unknown", by_content=False)


def _extension(filename: str) -> str:
    """The format-bearing suffix of a file name, ignoring a compression suffix: `.warc`."""
    name = PurePosixPath(filename.replace("\\", "/")).name.lower()
    for suffix in _COMPRESSION_SUFFIXES:
        name = name.removesuffix(suffix)
    return PurePosixPath(name).suffix


def binary_signature(sample: bytes) -> str | None:
    """Describe why the bytes look binary rather than text, or None if they look like text.

    Text in any common encoding has no NUL bytes (UTF-16/32 excepted: they start with a BOM)
    and almost no control characters.
    """
    sample = sample[:_BINARY_SAMPLE_BYTES]
    if not sample or charset_from_bom(sample) in ("utf-16", "utf-32"):
        return None
    for signature, description in _BINARY_SIGNATURES:
        if sample.startswith(signature):
            return f"starts with the signature of a {description}"
    first_nul = sample.find(b"\x00")
    if first_nul >= 0:
        return f"contains NUL bytes (first at byte {first_nul})"
    controls = len(sample) - len(sample.translate(None, delete=_CONTROL_BYTES))
    if controls / len(sample) > _MAX_CONTROL_RATIO:
        return f"{controls} of its first {len(sample)} bytes are control characters"
    return None


def media_type(content_type: str | None) -> str:
    """The lower-case media type of a Content-Type value: `text/html; charset=x` -> `text/html`."""
    return (content_type or "").split(";", 1)[0].split(",", 1)[0].strip().lower()


def charset_from_content_type(content_type: str | None) -> str | None:
    """The lower-case `charset` parameter of a Content-Type value, if any."""
    for parameter in (content_type or "").split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            return value.split(",", 1)[0].strip().strip("\"'").strip().lower() or None
    return None


def charset_from_meta(html: bytes) -> str | None:
    """The charset an HTML document declares in `<meta charset>` / `http-equiv` (first 2 KB)."""
    match = _META_CHARSET.search(html[:_META_CHARSET_BYTES])
    return match.group(1).decode("ascii").lower() if match else None


def charset_from_bom(data: bytes) -> str | None:
    """The encoding a byte-order mark at the start of the data declares, if any."""
    for bom, charset in _BOM_CHARSETS:
        if data.startswith(bom):
            return charset
    return None


def looks_like_html(payload: bytes) -> bool:
    """True when a payload without a Content-Type starts like an HTML document."""
    start = payload[:1024].removeprefix(_UTF8_BOM).lstrip()[:64].lower()
    return start.startswith(_HTML_STARTS)
