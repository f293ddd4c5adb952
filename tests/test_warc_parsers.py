"""fastwarc and warcio give the same items, record by record, on every shared archive.

WARC and WET files are read with fastwarc, which hands over to warcio at the first record it
cannot vouch for. Each test reads the same bytes with `warc_parser="warcio"` (the reference) and
with the default, and compares every item (content, type, URL, charset, rule, reason) and the
counts of skipped non-documents.
"""

from __future__ import annotations

import gzip
import io
import random
from pathlib import Path

import pytest

from fm_assets.formats import FileItem, FileRecordReader, ParsedRecord, fast_archive
from tests.paths import EDGE_DIR, WARC_DIR

ALL_ARCHIVES = sorted(p for p in WARC_DIR.rglob("*") if p.is_file())
BY_NAME = {path.name: path for path in ALL_ARCHIVES}
# Intact archives: fastwarc reads them to the end, warcio never takes over.
INTACT = [
    "cc-main-2020-34-sample.warc.gz",
    "cc-main-2024-22-whirlwind.warc.gz",
    "cc-main-2024-22-whirlwind.warc.wat.gz",
    "cc-main-2024-22-whirlwind.warc.wet.gz",
    "wget-sample-0000.warc.gz",
    "wget-sample-0001.warc.gz",
    "clueweb09-warc018-eucjp.warc.gz",
    "jwarc-single-record.warc.gz",
    "warcio-example.warc.gz",
]


def read_both(name: str, data: bytes) -> tuple[FileRecordReader, FileRecordReader]:
    """(warcio reader, default reader), both iterated over the same bytes."""
    reference = FileRecordReader(name, io.BytesIO(data), warc_parser="warcio")
    fast = FileRecordReader(name, io.BytesIO(data))
    return reference, fast


def assert_same(name: str, data: bytes) -> tuple[list[FileItem], FileRecordReader]:
    reference, fast = read_both(name, data)
    expected, got = list(reference), list(fast)

    for index, (want, have) in enumerate(zip(expected, got, strict=False)):
        assert have == want, f"{name}: item {index} differs"
    assert len(got) == len(expected), f"{name}: {len(got)} items, warcio gives {len(expected)}"
    assert fast.stats.skipped_by_type == reference.stats.skipped_by_type
    return got, fast


@pytest.mark.parametrize("path", ALL_ARCHIVES, ids=lambda path: path.name)
def test_every_shared_archive_gives_the_same_items(path: Path) -> None:
    assert_same(path.name, path.read_bytes())


@pytest.mark.parametrize("name", INTACT)
def test_intact_archives_are_read_by_fastwarc_to_the_end(name: str) -> None:
    _, reader = assert_same(name, BY_NAME[name].read_bytes())

    assert reader.stats.warcio_from_record is None


@pytest.mark.parametrize(
    ("name", "record"),
    [
        ("resiliparse-clipped.warc.gz", 1),  # fastwarc returns the cut record short, silently
        ("warcio-truncated.warc", 3),  # a Content-Length 2 bytes short: stray bytes follow it
        ("warcio-wrong-chunks.warc.gz", 1),
    ],
)
def test_damaged_archives_are_handed_to_warcio_at_the_damaged_record(
    name: str, record: int
) -> None:
    _, reader = assert_same(name, (EDGE_DIR / name).read_bytes())

    assert reader.stats.warcio_from_record == record


def test_legacy_arc_is_read_by_warcio() -> None:
    items, reader = assert_same("legacy.arc.gz", (EDGE_DIR / "warcio-legacy.arc.gz").read_bytes())

    assert reader.format == "arc" and isinstance(items[0], ParsedRecord)


EXAMPLE = gzip.decompress((EDGE_DIR / "warcio-example.warc.gz").read_bytes())


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("example.warc", EXAMPLE),
        ("example.warc.gz", (EDGE_DIR / "warcio-example.warc.gz").read_bytes()),
    ],
    ids=["plain", "gzip-per-record"],
)
def test_a_cut_anywhere_gives_the_same_items(name: str, data: bytes) -> None:
    for cut in range(1, len(data), 5):
        assert_same(name, data[:cut])


@pytest.mark.timeout(120)
def test_flipped_bits_give_the_same_items() -> None:
    rng = random.Random(11)
    for data in (EXAMPLE, (EDGE_DIR / "warcio-example.warc.gz").read_bytes()):
        for _ in range(200):
            damaged = bytearray(data)
            damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
            assert_same("example.warc", bytes(damaged))


PAGE = b"<!DOCTYPE html><html><body><p>" + b"words of a page " * 40 + b"</p></body></html>"


def warc_record(headers: bytes, block: bytes, *, length: int | None = None) -> bytes:
    size = len(block) if length is None else length
    return b"WARC/1.0\r\n" + headers + b"Content-Length: %d\r\n\r\n" % size + block + b"\r\n\r\n"


def response(url: bytes, http: bytes = b"HTTP/1.1 200 OK", extra: bytes = b"") -> bytes:
    block = http + b"\r\nContent-Type: text/html; charset=utf-8\r\n\r\n" + PAGE
    return warc_record(b"WARC-Type: response\r\nWARC-Target-URI: " + url + b"\r\n" + extra, block)


def request(url: bytes, line: bytes = b"GET / HTTP/1.1") -> bytes:
    block = line + b"\r\nHost: x\r\n\r\n"
    return warc_record(b"WARC-Type: request\r\nWARC-Target-URI: " + url + b"\r\n", block)


@pytest.mark.parametrize(
    "archive",
    [
        response(b"http://x/a") + response(b"<http://x/wget-brackets>"),
        response(b"http://x/a space") + response(b"http://x/b"),
        response(b"http://x/a", extra=b"X-Folded: one\r\n  two\r\n") + response(b"http://x/b"),
        response(b"http://x/a", extra=b"no colon here\r\n") + response(b"http://x/b"),
        response(b"http://x/a", extra=b"X-Empty: \r\nX-Trailing: v  \r\n"),
        response(b"http://x/a", extra=b"WARC-Target-URI: http://x/second\r\n"),
        response(b"http://x/a", extra=b"X-Latin: caf\xe9\r\n") + response(b"http://x/b"),
        response(b"http://x/a", http=b"HTTX/1.1 200 OK") + response(b"http://x/b"),
        request(b"http://x/a", line=b"FETCH / HTTP/1.1") + response(b"http://x/b"),
        request(b"http://x/a") + response(b"http://x/b"),
        warc_record(b"WARC-Type: response\r\n", PAGE) + response(b"http://x/b"),
        warc_record(b"WARC-Type: novel\r\nWARC-Target-URI: http://x/n\r\n", PAGE)
        + response(b"http://x/b"),
        warc_record(b"WARC-Target-URI: http://x/untyped\r\n", PAGE) + response(b"http://x/b"),
        response(b"http://x/a") + b"\r\n" + response(b"http://x/b"),  # an extra blank line
        b"\r\n" + response(b"http://x/a"),
        response(b"http://x/a") + b"junk after the last record\r\n",
    ],
    ids=[
        "brackets",
        "space-in-uri",
        "folded-header",
        "line-without-colon",
        "empty-and-trailing-values",
        "duplicate-header",
        "latin-1-header",
        "bad-http-status",
        "bad-request-line",
        "request-then-response",
        "no-target-uri",
        "unknown-type",
        "no-warc-type",
        "extra-blank-line",
        "leading-blank-line",
        "trailing-junk",
    ],
)
def test_odd_records_give_the_same_items(archive: bytes) -> None:
    assert_same("odd.warc", archive)
    assert_same("odd.warc.gz", gzip.compress(archive))


def test_records_too_large_to_hold_are_read_by_warcio(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast_archive, "_MAX_HELD_RECORD_BYTES", 500)
    archive = request(b"http://x/small") + response(b"http://x/big") + request(b"http://x/c")

    _, reader = assert_same("big.warc", archive)

    assert reader.stats.warcio_from_record == 2
