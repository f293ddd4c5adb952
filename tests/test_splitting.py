"""Large landed files are read in parallel parts cut where their records allow, and the parts give
exactly the records the whole file gives."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest

from fm_assets.commands import operations
from fm_assets.execution.runner import run_stage
from fm_assets.formats.splitting import (
    RangeReader,
    gzip_member_starts,
    gzip_split_points,
    line_split_points,
)
from fm_assets.settings import load_settings
from fm_assets.storage import catalog
from tests.paths import WARC_DIR

WARCS = [
    WARC_DIR / "cc-main-2020-34-sample.warc.gz",
    WARC_DIR / "wget-sample-0000.warc.gz",
    WARC_DIR / "wget-sample-0001.warc.gz",
]


def test_each_member_start_begins_a_warc_record() -> None:
    data = WARCS[0].read_bytes()
    starts = list(gzip_member_starts(io.BytesIO(data)))
    assert starts[0] == 0 and starts == sorted(set(starts))
    ends = [*starts[1:], len(data)]
    for start, end in zip(starts, ends, strict=True):
        # Each member decompresses on its own, to exactly one WARC record's start.
        assert gzip.decompress(data[start:end]).startswith(b"WARC/1.")


def test_split_points_cut_only_at_members_and_cover_the_file() -> None:
    data = b"".join(w.read_bytes() for w in WARCS)
    members = set(gzip_member_starts(io.BytesIO(data)))
    points = gzip_split_points(io.BytesIO(data), 100_000)
    assert points[0] == 0 and set(points) <= members and len(points) >= 4
    parts = [data[a:b] for a, b in zip(points, [*points[1:], len(data)], strict=True)]
    assert b"".join(gzip.decompress(p) for p in parts) == gzip.decompress(data)


def test_a_single_member_gzip_is_one_part() -> None:
    data = gzip.compress(b"WARC/1.0\r\n" * 100_000)
    assert gzip_split_points(io.BytesIO(data), 1_000) == [0]


def test_line_split_points_fall_after_newlines(tmp_path: Path) -> None:
    lines = [json.dumps({"text": f"document {i} " + "word " * (i % 17)}) for i in range(2_000)]
    data = ("\n".join(lines) + "\n").encode()
    points = line_split_points(io.BytesIO(data), len(data), 4_096)
    assert points[0] == 0 and len(points) > 5
    assert all(data[p - 1 : p] == b"\n" for p in points[1:])
    parts = [data[a:b] for a, b in zip(points, [*points[1:], len(data)], strict=True)]
    assert b"".join(parts) == data
    assert all(json.loads(p.split(b"\n", 1)[0]) for p in parts)


@pytest.mark.parametrize(("start", "end"), [(0, 10), (5, 100), (90, None), (100, 100)])
def test_range_reader_reads_exactly_its_range(start: int, end: int | None) -> None:
    data = bytes(range(100))
    with io.BufferedReader(RangeReader(io.BytesIO(data), start, end), 7) as part:
        assert part.read() == data[start:end]


@dataclass(frozen=True)
class RawRun:
    rows: list[tuple[object, ...]]  # (doc_id, record_id, ..., warc_record_id), sorted
    quarantine: list[tuple[object, ...]]  # (record_id, doc_id, rule), sorted
    parts: int  # parts the landed file was read in
    slices: int  # Ray tasks the parts were read by


def _raw_run(home: Path, files: list[Path], part_bytes: int) -> RawRun:
    """Land `files` in a fresh FM_HOME and run the raw stage on the session's Ray."""
    env = {"FM_HOME": str(home), "FM_PART_BYTES": str(part_bytes)}
    if os.environ.get("RAY_ADDRESS"):
        env["RAY_ADDRESS"] = os.environ["RAY_ADDRESS"]
    settings = load_settings(env)
    batch, _ = operations.land(settings, files, source="crawl", license="CC0-1.0")
    messages: list[str] = []
    run_stage(settings, "raw_documents", batch.batch_id, progress=messages.append)
    rows = catalog.read_table(settings, "raw_documents", namespace="cloud").select(
        [*ROW_COLUMNS, "record_offset", "record_line", "warc_record_id"]
    )
    bad = catalog.read_table(settings, "quarantine", namespace="cloud").select(
        ["record_id", "doc_id", "rule"]
    )
    planned = next(m for m in messages if " parts, " in m)  # "...: 1 files in 7 parts, 4 slices"
    return RawRun(
        rows=sorted(tuple(r.values()) for r in rows.to_pylist()),
        quarantine=sorted(tuple(r.values()) for r in bad.to_pylist()),
        parts=int(planned.split(" parts, ")[0].split()[-1]),
        slices=int(planned.split(" parts, ")[1].split()[0]),
    )


ROW_COLUMNS = ["doc_id", "record_id", "url", "source_file", "raw_size"]


@pytest.mark.slow
def test_a_split_file_gives_exactly_the_records_of_the_whole_file(
    ray_session: None, tmp_path: Path
) -> None:
    # One large multi-member WARC: three real crawls, the first repeated at the end, so its
    # records come back as exact duplicates of records in another part.
    crawl = tmp_path / "in" / "crawl.warc.gz"
    crawl.parent.mkdir()
    data = b"".join(w.read_bytes() for w in [*WARCS, WARCS[0]])
    crawl.write_bytes(data)

    whole = _raw_run(tmp_path / "whole", [crawl], 64 << 20)
    split = _raw_run(tmp_path / "split", [crawl], 64 << 10)

    assert whole.parts == 1 and split.parts >= 4
    # Its parts spread over several tasks, so duplicates are found across slices too.
    assert whole.slices == 1 and split.slices >= 2
    # Also where each record is: the same file offset and WARC-Record-ID from every part.
    assert split.rows == whole.rows and split.quarantine == whole.quarantine
    assert sum(1 for *_, rule in split.quarantine if rule == "exact_duplicate") >= 10
    for *_, offset, line, record_id in split.rows:
        assert line is None and isinstance(offset, int) and isinstance(record_id, str)
        # The offset starts the gzip member holding the record: Common Crawl's index offsets.
        head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data[offset : offset + 8192])
        assert head.startswith(b"WARC/1.") and f"WARC-Record-ID: {record_id}".encode() in head


@pytest.mark.slow
def test_a_split_jsonl_file_numbers_its_lines_like_the_whole_file(
    ray_session: None, tmp_path: Path
) -> None:
    lines = [
        "" if i % 7 == 3 else json.dumps({"id": i, "text": f"line {i}: " + "word " * (i % 50)})
        for i in range(3_000)
    ]
    pages = tmp_path / "in" / "pages.jsonl"
    pages.parent.mkdir()
    data = ("\n".join(lines) + "\n").encode()
    pages.write_bytes(data)

    whole = _raw_run(tmp_path / "whole", [pages], 64 << 20)
    split = _raw_run(tmp_path / "split", [pages], 16 << 10)

    assert whole.parts == 1 and split.parts >= 4
    # Its parts spread over several tasks, so duplicates are found across slices too.
    assert whole.slices == 1 and split.slices >= 2
    assert split.rows == whole.rows and split.quarantine == whole.quarantine
    starts = [0]
    for line in data.split(b"\n")[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    for doc_id, _, _, _, _, offset, line, record_id in split.rows:
        # The JSONL line (1-based, blank lines counted) and its first byte.
        text = json.loads(lines[line - 1])["text"]
        assert hashlib.sha256(text.encode()).hexdigest() == doc_id
        assert offset == starts[line - 1] and record_id is None
