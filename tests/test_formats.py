"""fm_assets.formats: landed files -> ParsedRecord / UnreadableRecord items, nothing lost silently.

Real archives are read in place from ../shared/data/warc; small inputs are made in tmp_path.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import brotli  # type: ignore[import-untyped]
import pytest
from warcio.statusandheaders import StatusAndHeaders  # type: ignore[import-untyped]
from warcio.warcwriter import WARCWriter  # type: ignore[import-untyped]

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

from fm_assets.formats import (
    FileItem,
    FileRecordReader,
    ParsedRecord,
    Rule,
    UnreadableRecord,
    detect_format,
    iter_file_records,
)
from tests.paths import EDGE_DIR, WARC_DIR, WGET_WARC

ALL_ARCHIVES = sorted(p for p in WARC_DIR.rglob("*") if p.is_file())


# --- helpers -------------------------------------------------------------------------------


def read_path(path: Path) -> tuple[list[FileItem], FileRecordReader]:
    with path.open("rb") as stream:
        reader = FileRecordReader(path.name, stream)
        return list(reader), reader


def read_bytes(name: str, data: bytes, **kwargs: int) -> list[FileItem]:
    return list(FileRecordReader(name, io.BytesIO(data), **kwargs))


def parsed(items: Sequence[FileItem]) -> list[ParsedRecord]:
    return [item for item in items if isinstance(item, ParsedRecord)]


def rules(items: Sequence[FileItem]) -> list[str]:
    """`P` for a parsed item, the rule for an unreadable one."""
    return [item.rule if isinstance(item, UnreadableRecord) else "P" for item in items]


def assert_numbered(items: Sequence[FileItem]) -> None:
    assert items, "every file yields at least one item"
    assert [item.index for item in items] == list(range(len(items)))


def reason(item: FileItem) -> str:
    assert isinstance(item, UnreadableRecord), item
    return item.reason


@dataclass(frozen=True)
class WarcInput:
    """One record for make_warc."""

    url: str
    record_type: str
    body: bytes
    http_headers: StatusAndHeaders | None = None
    warc_headers: dict[str, str] = field(default_factory=dict)
    content_type: str | None = None  # the record's own Content-Type (resource records)


def http_response(
    url: str, body: bytes, headers: Sequence[tuple[str, str]], **warc_headers: str
) -> WarcInput:
    http = StatusAndHeaders("200 OK", list(headers), protocol="HTTP/1.1")
    return WarcInput(url, "response", body, http, warc_headers)


def resource(url: str, body: bytes, content_type: str) -> WarcInput:
    return WarcInput(url, "resource", body, content_type=content_type)


def make_warc(*records: WarcInput) -> bytes:
    """An uncompressed WARC written by warcio."""
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=False)
    for record in records:
        warc_record = writer.create_warc_record(
            record.url,
            record.record_type,
            payload=io.BytesIO(record.body),
            http_headers=record.http_headers,
            warc_content_type=record.content_type,
            warc_headers_dict=record.warc_headers,
        )
        writer.write_record(warc_record)
    return out.getvalue()


# --- real archives -------------------------------------------------------------------------


def test_common_crawl_sample_yields_its_16_html_pages() -> None:
    items, reader = read_path(WARC_DIR / "cc-main-2020-34-sample.warc.gz")

    assert_numbered(items)
    assert rules(items) == ["P"] * 16
    assert {item.content_type for item in parsed(items)} == {"html"}
    assert all(item.url and item.url.startswith("http://") for item in parsed(items))
    assert reader.format == "warc"
    assert dict(reader.stats.skipped_by_type) == {"warcinfo": 1, "request": 17, "metadata": 16}
    assert reader.skipped_non_documents == 34
    charsets = {item.url: item.charset for item in parsed(items)}
    assert charsets["http://01spb.ru/company/"] == "windows-1251"  # from the HTTP header
    assert charsets["http://041696.com/15477/list_6_4.html"] == "gbk"  # header has none: <meta>


@pytest.mark.parametrize(
    ("name", "pages", "unique_urls"),
    [("wget-sample-0000.warc.gz", 22, 22), ("wget-sample-0001.warc.gz", 15, 13)],
)
def test_wget_samples_yield_the_pages_the_readme_lists(
    name: str, pages: int, unique_urls: int
) -> None:
    items, reader = read_path(WARC_DIR / name)

    # data/README.md: "22 + 15 real English pages". Each file also holds two `resource` records
    # (wget's arguments and log under metadata://): crawl bookkeeping, skipped, not documents.
    assert rules(items) == ["P"] * pages
    assert all(item.content_type == "html" and item.charset == "utf-8" for item in parsed(items))
    assert all(item.url and item.url.startswith("https://") for item in parsed(items))
    assert reader.stats.skipped_by_type["resource"] == 2
    assert reader.stats.skipped_by_type["request"] == pages
    # wget-sample-0001 fetched https://allenai.org/ three times: every capture is kept here.
    assert len({item.url for item in parsed(items)}) == unique_urls


def test_whirlwind_warc_wet_and_wat_hold_the_same_page() -> None:
    url = "https://an.wikipedia.org/wiki/Escopete"
    warc, _ = read_path(WARC_DIR / "cc-main-2024-22-whirlwind.warc.gz")
    wet, wet_reader = read_path(WARC_DIR / "cc-main-2024-22-whirlwind.warc.wet.gz")
    wat, _ = read_path(WARC_DIR / "cc-main-2024-22-whirlwind.warc.wat.gz")

    [page] = parsed(warc)
    assert (page.content_type, page.url, page.charset) == ("html", url, "utf-8")
    assert page.content.startswith(b"<!DOCTYPE html>")
    [text] = parsed(wet)
    assert wet_reader.format == "wet"
    assert (text.content_type, text.url) == ("text", url)
    assert text.content.startswith(b"Escopete - Biquipedia")
    # A WAT file holds only metadata: no document, but never an empty result.
    assert rules(wat) == [Rule.NO_DOCUMENTS]
    assert "1 metadata" in reason(wat[0])


@pytest.mark.parametrize("path", ALL_ARCHIVES, ids=lambda path: path.name)
def test_every_archive_is_read_without_raising(path: Path) -> None:
    items, _ = read_path(path)

    assert_numbered(items)
    for item in parsed(items):
        assert item.content_type in ("html", "text")
        assert item.content


def test_warc_0_18_euc_jp_pages_keep_their_declared_charset() -> None:
    items, reader = read_path(EDGE_DIR / "clueweb09-warc018-eucjp.warc.gz")

    assert rules(items) == ["P"] * 29
    assert dict(reader.stats.skipped_by_type) == {"warcinfo": 1}
    for item in parsed(items):
        assert (item.content_type, item.charset) == ("html", "euc-jp")
        # The bodies are gzip Content-Encoded: warcio decoded them to EUC-JP HTML.
        assert item.content.startswith(b"<html>")
        item.content.decode("euc-jp")
    assert "ブラウニー" in parsed(items)[0].content.decode("euc-jp")


def test_single_record_warc() -> None:
    items, reader = read_path(EDGE_DIR / "jwarc-single-record.warc.gz")

    [page] = items
    assert isinstance(page, ParsedRecord)
    assert (page.url, page.charset, len(page.content)) == (
        "http://commoncrawl.org/",
        "utf-8",
        20289,
    )
    assert reader.skipped_non_documents == 0


def test_clipped_archive_ends_with_one_truncated_item() -> None:
    items, _ = read_path(EDGE_DIR / "resiliparse-clipped.warc.gz")

    # Its only record, 88,275 bytes long, is cut inside the gzip stream.
    [item] = items
    assert isinstance(item, UnreadableRecord)
    assert item.rule == Rule.TRUNCATED_ARCHIVE
    assert "record #1" in item.reason
    assert "byte 0 of the decompressed data" in item.reason
    assert "13068 of its 88275 bytes are missing" in item.reason
    assert "18184 compressed bytes" in item.reason


@pytest.mark.parametrize(
    "name",
    [
        "warcio-example.warc.gz",
        # One gzip member for the whole file: warcio alone refuses it after the first record.
        "warcio-bad-non-chunked.warc.gz",
        # A record split across gzip members: warcio alone fails on the second member.
        "warcio-wrong-chunks.warc.gz",
        "warcio-legacy.arc.gz",
    ],
)
def test_example_page_is_recovered_from_every_packaging(name: str) -> None:
    items, reader = read_path(EDGE_DIR / name)

    [page] = items
    assert isinstance(page, ParsedRecord)
    assert (page.url, page.content_type, page.charset) == ("http://example.com/", "html", "utf-8")
    assert page.content.startswith(b"<!doctype html>")
    assert len(page.content) == 1270  # de-gzipped (Content-Encoding: gzip in the WARCs)
    assert reader.format == ("arc" if name.endswith(".arc.gz") else "warc")


def test_example_archive_counts_its_non_documents() -> None:
    _, reader = read_path(EDGE_DIR / "warcio-example.warc.gz")

    assert dict(reader.stats.skipped_by_type) == {"warcinfo": 2, "request": 2, "revisit": 1}


def test_wrong_content_length_keeps_the_page_and_reports_the_stray_bytes() -> None:
    items, reader = read_path(EDGE_DIR / "warcio-truncated.warc")
    example, _ = read_path(EDGE_DIR / "warcio-example.warc.gz")

    # The response's Content-Length is 2 bytes short: its gzip body loses 2 trailer bytes (the
    # page still decodes in full) and 4 stray bytes stand where a blank line should.
    page, stray = items
    assert isinstance(page, ParsedRecord) and isinstance(example[0], ParsedRecord)
    # The same record; only where it starts differs (here a plain file, there a gzip member).
    assert dataclasses.replace(page, offset=None) == dataclasses.replace(example[0], offset=None)
    assert (page.offset, example[0].offset) == (1197, 784)
    assert isinstance(stray, UnreadableRecord)
    assert stray.rule == Rule.INVALID_WARC_RECORD
    assert "record #3 (response http://example.com/) at byte 1197" in stray.reason
    assert "Content-Length 973" in stray.reason and "at byte 2560" in stray.reason
    # The records around it are still read.
    assert dict(reader.stats.skipped_by_type) == {"warcinfo": 2, "request": 1}


# --- truncation anywhere -------------------------------------------------------------------

EXAMPLE_WARC = gzip.decompress((EDGE_DIR / "warcio-example.warc.gz").read_bytes())


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("example.warc", EXAMPLE_WARC),
        ("example.warc.gz", (EDGE_DIR / "warcio-example.warc.gz").read_bytes()),
        ("example.warc.gz", gzip.compress(EXAMPLE_WARC)),  # one gzip member
    ],
    ids=["plain", "gzip-per-record", "gzip-whole"],
)
def test_a_cut_anywhere_yields_what_precedes_it_then_one_truncated_item(
    name: str, data: bytes
) -> None:
    full = parsed(read_bytes(name, data))
    for cut in range(2, len(data), 3):
        items = read_bytes(name, data[:cut])

        assert_numbered(items)
        *before, last = items
        assert parsed(before) == full[: len(before)]  # only complete documents, in order
        rest = data[cut:].lstrip(b"\r\n")
        # Between two uncompressed records (or gzip members) a cut leaves nothing to notice.
        cut_between_records = rest.startswith((b"WARC/", b"\x1f\x8b")) or not rest
        if not cut_between_records:
            assert isinstance(last, UnreadableRecord), f"cut at {cut}: {items}"
            assert last.rule == Rule.TRUNCATED_ARCHIVE, f"cut at {cut}: {last.reason}"
            assert re.search(r"byte \d+|\d+ compressed bytes", last.reason), last.reason


def test_flipped_bits_never_raise() -> None:
    data = bytes((EDGE_DIR / "warcio-example.warc.gz").read_bytes())
    rng = random.Random(7)
    for _ in range(300):
        damaged = bytearray(data)
        damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
        assert_numbered(read_bytes("example.warc.gz", bytes(damaged)))


# --- record-level rules in archives --------------------------------------------------------

_WORDS = random.Random(0).choices(["web", "page", "data", "text", "crawl", "token", "model"], k=400)
PAGE = f"<!DOCTYPE html><html><body><p>{' '.join(_WORDS)}</p></body></html>".encode()


def test_other_content_types_are_unsupported_and_say_which() -> None:
    warc = make_warc(
        http_response("http://x/a.png", b"\x89PNG\r\n\x1a\n", [("Content-Type", "image/png")]),
        http_response("http://x/p", PAGE, [("Content-Type", "text/html; charset=ISO-8859-1")]),
        http_response("http://x/d.pdf", b"%PDF-1.4", [("Content-Type", "application/pdf")]),
        http_response("http://x/s.css", b"p{}", [("Content-Type", "text/css")]),
        http_response("http://x/x", PAGE, [("Content-Type", "application/xhtml+xml")]),
        http_response("http://x/t", b"plain words", [("Content-Type", "text/plain")]),
    )
    items = read_bytes("mixed.warc", warc)

    unsupported = Rule.UNSUPPORTED_CONTENT_TYPE
    assert rules(items) == [unsupported, "P", unsupported, unsupported, "P", "P"]
    assert [(item.content_type, item.charset) for item in parsed(items)] == [
        ("html", "iso-8859-1"),
        ("html", None),
        ("text", None),
    ]
    reasons = [item.reason for item in items if isinstance(item, UnreadableRecord)]
    assert "'image/png'" in reasons[0] and "http://x/a.png" in reasons[0]
    assert "'application/pdf'" in reasons[1]
    assert "'text/css'" in reasons[2]


def test_resource_records_and_missing_content_types() -> None:
    warc = make_warc(
        resource("file:///notes.txt", b"some notes", "text/plain; charset=utf-8"),
        resource("metadata://crawler/log.txt", b"crawler log", "text/plain"),
        http_response("http://x/untyped", PAGE, []),
        http_response("http://x/untyped.bin", b"\x00\x01binary", []),
    )
    items = read_bytes("res.warc.gz", gzip.compress(warc))

    assert rules(items) == ["P", "P", Rule.UNSUPPORTED_CONTENT_TYPE]
    assert [(i.url, i.content_type, i.charset) for i in parsed(items)] == [
        ("file:///notes.txt", "text", "utf-8"),
        ("http://x/untyped", "html", None),  # sniffed: it starts like HTML
    ]


def test_content_encodings_are_decoded_or_flagged() -> None:
    html = [("Content-Type", "text/html")]
    cut_gzip = gzip.compress(PAGE)[:-200]
    warc = make_warc(
        http_response("http://x/br", brotli.compress(PAGE), [*html, ("Content-Encoding", "br")]),
        http_response("http://x/gz", gzip.compress(PAGE), [*html, ("Content-Encoding", "gzip")]),
        http_response("http://x/cut", cut_gzip, [*html, ("Content-Encoding", "gzip")]),
        # The crawler declared it stored only part of the body: a partial page, not damage.
        http_response(
            "http://x/declared-cut",
            cut_gzip,
            [*html, ("Content-Encoding", "gzip")],
            **{"WARC-Truncated": "length"},
        ),
        http_response("http://x/png-as-html", b"\x89PNG\r\n\x1a\n\x00\x00", html),
    )
    items = read_bytes("enc.warc", warc)

    assert rules(items) == ["P", "P", Rule.CORRUPT_CONTENT_ENCODING, "P", Rule.BINARY_CONTENT]
    br_page, gz_page, partial = parsed(items)
    assert br_page.content == PAGE and gz_page.content == PAGE
    assert PAGE.startswith(partial.content) and len(partial.content) < len(PAGE)
    assert "http://x/cut" in reason(items[2])
    assert "PNG image" in reason(items[4])


def test_oversized_payload_is_quarantined_and_reading_goes_on() -> None:
    warc = make_warc(
        http_response("http://x/big", PAGE, [("Content-Type", "text/html")]),
        http_response("http://x/small", b"<p>hi</p>", [("Content-Type", "text/html")]),
    )
    items = read_bytes("big.warc", warc, max_record_bytes=1000)

    assert rules(items) == [Rule.RECORD_TOO_LARGE, "P"]
    assert parsed(items)[0].url == "http://x/small"


def test_garbage_named_like_a_warc() -> None:
    [item] = read_bytes("x.warc", b"this is not an archive at all\r\nsecond line\r\n\r\n")

    assert isinstance(item, UnreadableRecord)
    assert item.rule == Rule.INVALID_WARC_RECORD
    assert "record #1" in item.reason and "byte 0" in item.reason


# --- JSONL ---------------------------------------------------------------------------------


def test_jsonl_yields_one_item_per_non_blank_line_with_line_numbers(tmp_path: Path) -> None:
    lines = [
        b'{"id": 7, "text": "first", "url": "https://a.example/", "lang": "en"}',
        b'{"id": "b", "html": "<p>second</p>"}',
        b"",  # blank: skipped, not an item
        b'{"text": "caf\xe9"}',  # Latin-1, not UTF-8
        b'{"text": "unclosed',
        b'{"title": "no text field"}',
        b"   ",
        b'["an", "array"]',
        b'{"text": "lone \\ud800 surrogate"}',
        b'{"text": "last", "id": 3.5}',
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    items, _ = read_path(path)

    assert_numbered(items)
    assert rules(items) == [
        "P",
        "P",
        Rule.INVALID_UTF8,
        Rule.INVALID_JSON,
        Rule.MISSING_TEXT_FIELD,
        Rule.INVALID_JSON,
        Rule.INVALID_UTF8,
        "P",
    ]
    first, second, last = parsed(items)
    assert first == ParsedRecord(
        0, b"first", "text", "https://a.example/", "utf-8", "en", "7", offset=0, line=1
    )
    assert (second.content, second.content_type, second.external_id) == (
        b"<p>second</p>",
        "html",
        "b",
    )
    assert (last.content, last.external_id) == (b"last", "3.5")
    bad = [item for item in items if isinstance(item, UnreadableRecord)]
    assert [item.reason.split(" ")[1] for item in bad] == ["4", "5", "6", "8", "9"]
    assert "byte 0xe9" in bad[0].reason
    assert "got an array" in bad[3].reason
    assert bad[0].raw_sha256 == hashlib.sha256(lines[3]).hexdigest()
    assert bad[1].raw_sha256 == hashlib.sha256(lines[4]).hexdigest()


def test_gzipped_jsonl_cut_short_keeps_the_complete_lines() -> None:
    body = b"".join(json.dumps({"text": f"doc {n} " * 20}).encode() + b"\n" for n in range(200))
    items = read_bytes("docs.jsonl.gz", gzip.compress(body)[:-300])

    *documents, last = items
    assert rules(documents) == ["P"] * len(documents) and len(documents) > 100
    assert [d.content for d in parsed(documents)] == [
        json.loads(line)["text"].encode() for line in body.splitlines()[: len(documents)]
    ]
    assert isinstance(last, UnreadableRecord)
    assert last.rule == Rule.TRUNCATED_FILE
    assert f"line {len(documents) + 1}" in last.reason


def test_jsonl_line_over_the_limit_is_skipped_not_loaded() -> None:
    data = b'{"text": "' + b"x" * 5000 + b'"}\n{"text": "ok"}\n'
    items = read_bytes("lines.jsonl", data, max_record_bytes=1000)

    assert rules(items) == [Rule.RECORD_TOO_LARGE, "P"]
    assert "line 1" in reason(items[0])


# --- single-document and unreadable files --------------------------------------------------


def test_empty_file(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "empty.txt.gz").write_bytes(gzip.compress(b""))

    for name in ("empty.txt", "empty.txt.gz"):
        items, _ = read_path(tmp_path / name)
        assert rules(items) == [Rule.EMPTY_FILE]


def test_binary_files_are_not_documents(tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10"
    files = {
        "random.bin": random.Random(1).randbytes(4096),
        "random.txt": random.Random(2).randbytes(200),
        "image.png": png,
        "image.txt": png,  # a wrong extension does not make it text
        "random.warc": random.Random(3).randbytes(4096),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        [item] = read_path(tmp_path / name)[0]
        assert isinstance(item, UnreadableRecord)
        assert item.rule == Rule.BINARY_FILE, name
    assert "PNG image" in reason(read_bytes("image.txt", png)[0])


def test_large_single_line_text_file_is_one_record(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    size = 50 * 1024 * 1024
    with path.open("wb") as out:
        for _ in range(size // (1024 * 1024)):
            out.write(b"a" * (1024 * 1024))

    items, _ = read_path(path)

    [item] = items
    assert isinstance(item, ParsedRecord)
    assert (item.content_type, len(item.content)) == ("text", size)


def test_text_in_a_legacy_encoding_is_still_a_document() -> None:
    data = "Grüße aus Köln, ça va très bien.".encode("latin-1")
    [item] = read_bytes("note.txt", data)

    assert isinstance(item, ParsedRecord)
    assert (item.content, item.content_type, item.charset) == (data, "text", None)


def test_html_file_reports_its_meta_charset() -> None:
    html = b'<html><head><meta http-equiv="Content-Type" content="text/html; charset=Shift_JIS">'
    [plain] = read_bytes("page.htm", html)
    [zipped] = read_bytes("page.html.gz", gzip.compress(b"<!doctype html><meta charset=utf-8>"))

    assert isinstance(plain, ParsedRecord) and isinstance(zipped, ParsedRecord)
    assert (plain.content, plain.content_type, plain.charset) == (html, "html", "shift_jis")
    assert (zipped.content_type, zipped.charset) == ("html", "utf-8")


def test_unknown_and_corrupt_files() -> None:
    [unknown] = read_bytes("notes.md", b"# Title\n\nsome notes")
    [corrupt] = read_bytes("page.txt.gz", b"\x1f\x8b\x08\x00" + bytes(range(200)))

    assert isinstance(unknown, UnreadableRecord) and unknown.rule == Rule.UNKNOWN_FORMAT
    assert "notes.md" in unknown.reason
    assert isinstance(corrupt, UnreadableRecord) and corrupt.rule == Rule.CORRUPT_GZIP


# --- API -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filename", "head", "expected"),
    [
        ("a.warc.gz", gzip.compress(b"WARC/1.1\r\nWARC-Type: warcinfo\r\n"), "warc"),
        ("a.warc.wet.gz", gzip.compress(b"WARC/1.0\r\nWARC-Type: warcinfo\r\n"), "wet"),
        ("anything", b"WARC/1.0\r\nWARC-Type: conversion\r\n", "wet"),
        ("a.arc", b"filedesc://a.arc 0.0.0.0 20000101000000 text/plain 70\n", "arc"),
        ("a.txt", b"WARC/0.18\r\n", "warc"),  # content beats the extension
        ("a.jsonl.gz", gzip.compress(b'{"text": "x"}\n'), "jsonl"),
        ("a.json", b"not json at all", "jsonl"),  # the extension decides when content cannot
        ("data", b'  {"text": "x"}\n', "jsonl"),
        ("page.HTM", b"hello", "html"),
        ("page", b"\n<!DOCTYPE html><html>", "html"),
        ("notes.txt", b"hello", "text"),
        ("image.png", b"\x89PNG\r\n", "unknown"),
    ],
)
def test_detect_format(filename: str, head: bytes, expected: str) -> None:
    assert detect_format(filename, head) == expected


def test_iter_file_records_matches_the_reader() -> None:
    data = (EDGE_DIR / "warcio-example.warc.gz").read_bytes()

    assert list(iter_file_records("x.warc.gz", io.BytesIO(data))) == read_bytes("x.warc.gz", data)


def test_a_reader_reads_its_stream_once() -> None:
    reader = FileRecordReader("a.txt", io.BytesIO(b"hello"))
    list(reader)

    with pytest.raises(RuntimeError, match="once"):
        iter(reader)


class _FailingStream(io.RawIOBase):
    """A source whose connection drops after some bytes."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        if not self._data:
            raise ConnectionResetError("connection reset by peer")
        view = memoryview(buffer)
        size = min(len(view), len(self._data))
        view[:size], self._data = self._data[:size], self._data[size:]
        return size


def test_source_errors_are_raised_not_quarantined() -> None:
    # A network failure is not bad data: the caller must retry the file, not quarantine it.
    data = WGET_WARC.read_bytes()[:100_000]
    stream = io.BufferedReader(_FailingStream(data))

    with pytest.raises(ConnectionResetError):
        list(iter_file_records("wget.warc.gz", stream))
