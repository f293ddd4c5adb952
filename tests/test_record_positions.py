"""Every parsed record says where it is in its file: the byte offset (for gzip data the offset of
the gzip member holding it, as Common Crawl's indexes give it), the WARC-Record-ID, the JSONL
line. Lineage answers "which bytes of which landed file" from these."""

from __future__ import annotations

import gzip
import io
import json
import zlib
from pathlib import Path

import pytest

from fm_assets.formats import FileRecordReader, ParsedRecord
from tests.paths import EDGE_DIR, WARC_DIR

GZIPPED_WARCS = [
    WARC_DIR / "cc-main-2020-34-sample.warc.gz",
    WARC_DIR / "wget-sample-0000.warc.gz",
    WARC_DIR / "cc-main-2024-22-whirlwind.warc.wet.gz",
    EDGE_DIR / "clueweb09-warc018-eucjp.warc.gz",
]


def _parsed(name: str, data: bytes, parser: str = "fastwarc") -> list[ParsedRecord]:
    reader = FileRecordReader(name, io.BytesIO(data), warc_parser=parser)
    return [item for item in reader if isinstance(item, ParsedRecord)]


@pytest.mark.parametrize("parser", ["fastwarc", "warcio"])
@pytest.mark.parametrize("path", GZIPPED_WARCS, ids=lambda p: p.name)
def test_a_gzipped_records_offset_starts_the_member_that_holds_it(path: Path, parser: str) -> None:
    data = path.read_bytes()
    records = _parsed(path.name, data, parser)
    assert records
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets)), "one record per member, in file order"
    for record in records:
        assert record.offset is not None and record.warc_record_id
        head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data[record.offset :], 65536)
        assert head.startswith(b"WARC/")
        assert f"WARC-Record-ID: {record.warc_record_id}".encode() in head.split(b"\r\n\r\n")[0]


@pytest.mark.parametrize("parser", ["fastwarc", "warcio"])
def test_an_uncompressed_records_offset_is_its_first_byte(parser: str) -> None:
    data = gzip.decompress((WARC_DIR / "wget-sample-0001.warc.gz").read_bytes())
    records = _parsed("crawl.warc", data, parser)
    assert len(records) >= 3
    for record in records:
        assert record.offset is not None
        headers = data[record.offset :].split(b"\r\n\r\n", 1)[0]
        assert headers.startswith(b"WARC/1.")
        assert f"WARC-Record-ID: {record.warc_record_id}".encode() in headers


def test_the_two_parsers_agree_on_every_position() -> None:
    data = (WARC_DIR / "cc-main-2020-34-sample.warc.gz").read_bytes()
    fast = _parsed("cc.warc.gz", data, "fastwarc")
    slow = _parsed("cc.warc.gz", data, "warcio")
    assert [(r.offset, r.warc_record_id) for r in fast] == [
        (r.offset, r.warc_record_id) for r in slow
    ]


@pytest.mark.parametrize("gzipped", [False, True])
def test_jsonl_records_carry_their_line_and_its_first_byte(gzipped: bool) -> None:
    lines = [json.dumps({"text": f"document {i}"}) if i % 3 else "" for i in range(1, 40)]
    text = ("\n".join(lines) + "\n").encode()
    records = _parsed("pages.jsonl", gzip.compress(text) if gzipped else text)
    expected = [number for number, line in enumerate(lines, start=1) if line]
    assert [r.line for r in records] == expected
    for record in records:
        assert record.line is not None and record.warc_record_id is None
        assert json.loads(lines[record.line - 1])["text"].encode() == record.content
        # A single-member gzip file starts every line in member 0; a plain file at its byte.
        if gzipped:
            assert record.offset == 0
        else:
            start = sum(len(line) + 1 for line in lines[: record.line - 1])
            assert record.offset == start


def test_a_whole_file_document_starts_at_byte_zero() -> None:
    (record,) = _parsed("page.html", b"<html><body><p>Hello there.</p></body></html>")
    assert (record.offset, record.line, record.warc_record_id) == (0, None, None)
