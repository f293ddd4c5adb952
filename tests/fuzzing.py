"""Fuzzing the readers: seed files, byte mutations, and the invariants every input keeps.

Shared by the Hypothesis properties (tests/test_fuzz_readers.py), the atheris run
(tests/fuzz_atheris.py) and the reliability benchmark. The invariants:

- a file reader (`FileRecordReader`, every format) never raises on bad bytes; it yields at least
  one item, numbered 0..n-1, each a parsed document or an unreadable record with a known rule
  and a reason;
- the raw and extract stages account for every record: in = kept + quarantined, and every
  quarantine row has a rule and a reason;
- a manifest reader (landing batch, shard set) returns a manifest or raises ValueError saying
  what is wrong, never another exception.

Violations raise `Unaccounted`; any other exception escaping a reader is the reader's bug.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from fm_assets.formats import FileRecordReader, ParsedRecord, Rule, UnreadableRecord
from tests.paths import ARTICLE_BENCHMARK, EDGE_DIR, WARC_DIR

RULES = frozenset(v for k, v in vars(Rule).items() if k.isupper())
# Small enough that the stage-level checks stay fast, large enough to exceed any seed.
MAX_RECORD_BYTES = 1 << 20


class Unaccounted(AssertionError):
    """An input broke a reader's contract: something was lost, unnumbered or unexplained."""


# --- seeds -----------------------------------------------------------------------------------


def _jsonl_seed() -> bytes:
    lines = [
        {"id": 1, "text": "A plain text document about web crawls.", "lang": "en"},
        {"id": "two", "html": "<html><body><p>An HTML field, kept as a page.</p></body></html>"},
        {"text": "Ein deutsches Dokument.", "url": "https://example.org/de"},
    ]
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines) + b"not json\n"


def _smallest_article() -> bytes:
    pages = sorted((ARTICLE_BENCHMARK / "html").glob("*.html.gz"), key=lambda p: p.stat().st_size)
    return gzip.decompress(pages[0].read_bytes())


def _landing_manifest() -> bytes:
    sha = hashlib.sha256(b"crawl").hexdigest()
    manifest = {
        "format_version": 1,
        "batch_id": "b-0123456789abcdef0123",
        "source": "crawl",
        "license": "CC0-1.0",
        "namespace": "default",
        "ingested_at": "2026-01-01T00:00:00+00:00",
        "tool_version": "1",
        "files": [
            {
                "name": "crawl.warc.gz",
                "sha256": sha,
                "size": 5,
                "key": f"landing/batches/b-0123456789abcdef0123/files/{sha[:16]}-crawl.warc.gz",
            }
        ],
    }
    return json.dumps(manifest, indent=2, sort_keys=True).encode()


def _shard_manifest() -> bytes:
    from fm_loader.format.manifest import ShardInfo, ShardSetManifest, schema_fingerprint

    shard = ShardInfo("shard.00000.mds", hashlib.sha256(b"shard").hexdigest(), 4096, 3, 100)
    return (
        ShardSetManifest(
            format_version=1,
            shard_set_key="web@v1/0123456789ab-s64",
            source_version="web@v1",
            version_content_hash="0" * 64,
            tokenizer_hash="1" * 64,
            vocab_size=50_000,
            token_dtype="uint16",
            pad_token_id=1,
            seq_len=64,
            schema_fingerprint=schema_fingerprint(64, "uint16"),
            pipeline_version="1",
            created_at="2026-01-01T00:00:00+00:00",
            num_samples=3,
            num_tokens=100,
            num_documents=7,
            packing_efficiency=0.52,
            shards=(shard,),
        )
        .to_json()
        .encode()
    )


@functools.cache
def file_seeds() -> dict[str, bytes]:
    """Real, small inputs of every format the readers take, by the file name they land as."""
    warc_gz = (WARC_DIR / "cc-main-2024-22-whirlwind.warc.gz").read_bytes()
    wet_gz = (WARC_DIR / "cc-main-2024-22-whirlwind.warc.wet.gz").read_bytes()
    arc_gz = (EDGE_DIR / "warcio-legacy.arc.gz").read_bytes()
    return {
        "crawl.warc.gz": warc_gz,
        "crawl.warc": gzip.decompress(warc_gz),
        "crawl.warc.wet.gz": wet_gz,
        "crawl.wet": gzip.decompress(wet_gz),
        "legacy.arc.gz": arc_gz,
        "legacy.arc": gzip.decompress(arc_gz),
        "docs.jsonl": _jsonl_seed(),
        "docs.jsonl.gz": gzip.compress(_jsonl_seed(), mtime=0),
        "page.html": _smallest_article(),
        "notes.txt": "Plain notes, with a non-ASCII word: naïve.\n".encode(),
    }


@functools.cache
def manifest_seeds() -> dict[str, bytes]:
    """A valid landing manifest and a valid shard-set manifest."""
    return {"landing": _landing_manifest(), "shard set": _shard_manifest()}


# --- mutations -------------------------------------------------------------------------------

MUTATIONS = ("flip", "set", "insert", "delete", "truncate", "duplicate")


@dataclass(frozen=True)
class Mutation:
    """One edit of a byte string; positions and lengths wrap around the data's length."""

    kind: str  # one of MUTATIONS
    position: int
    value: int = 0  # the bit to flip, the byte to set, or a length
    payload: bytes = b""  # bytes to insert


def mutate(data: bytes, mutations: Sequence[Mutation]) -> bytes:
    """`data` with each mutation applied in turn."""
    out = bytearray(data)
    for m in mutations:
        at = m.position % (len(out) + 1)
        if m.kind == "flip" and at < len(out):
            out[at] ^= 1 << (m.value % 8)
        elif m.kind == "set" and at < len(out):
            out[at] = m.value % 256
        elif m.kind == "insert":
            out[at:at] = m.payload
        elif m.kind == "delete":
            del out[at : at + 1 + m.value % 4096]
        elif m.kind == "truncate":
            del out[at:]
        elif m.kind == "duplicate":
            out[at:at] = out[at : at + 1 + m.value % 4096]
    return bytes(out)


# --- invariants ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Accounting:
    """What reading one file gave."""

    items: int
    parsed: int
    rules: Counter[str]  # unreadable items by rule
    skipped_non_documents: int


def read_accounted(name: str, data: bytes, *, warc_parser: str = "fastwarc") -> Accounting:
    """Read `data` as a landed file called `name`; raise Unaccounted if the contract breaks."""
    reader = FileRecordReader(
        name, io.BytesIO(data), max_record_bytes=MAX_RECORD_BYTES, warc_parser=warc_parser
    )
    items = list(reader)
    if not items:
        raise Unaccounted(f"{name}: no item at all for {len(data)} bytes")
    numbers = [item.index for item in items]
    if numbers != list(range(len(items))):
        raise Unaccounted(f"{name}: items numbered {numbers[:20]}")
    rules: Counter[str] = Counter()
    parsed = 0
    for item in items:
        if isinstance(item, ParsedRecord):
            if item.content_type not in ("html", "text") or not isinstance(item.content, bytes):
                raise Unaccounted(f"{name}: item {item.index} is a {item.content_type!r} document")
            parsed += 1
        elif isinstance(item, UnreadableRecord):
            if item.rule not in RULES or not item.reason.strip():
                raise Unaccounted(f"{name}: item {item.index} rule {item.rule!r}: {item.reason!r}")
            rules[item.rule] += 1
        else:
            raise Unaccounted(f"{name}: item {item.index} is a {type(item).__name__}")
    return Accounting(len(items), parsed, rules, reader.skipped_non_documents)


@dataclass(frozen=True)
class StageAccounting:
    """Records through the raw and extract stages for one file."""

    records: int  # the raw stage's records: one per reader item
    quarantined: int  # by either stage, each with a rule and a reason
    kept: int  # documents the extract stage kept


def stages_accounted(directory: Path, name: str, data: bytes) -> StageAccounting:
    """Land `data` as file `name` in `directory` and run the raw and extract stages on it (in
    this process); raise Unaccounted when a record is neither kept nor quarantined with a reason."""
    from fm_assets.stages.extract import ExtractStage
    from fm_assets.stages.raw import LANDED_PARTS, RawStage

    path = directory / name
    path.write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    part = {
        "batch_id": "b-fuzz",
        "file_name": name,
        "file_sha256": sha,
        "file_uri": str(path),
        "source": "fuzz",
        "license": "CC0-1.0",
        "namespace": "default",
        "part": 0,
        "start": 0,
        "end": -1,
        "whole_file": True,
        "first_index": 0,
        "first_line": 1,
        "file_items": -1,
    }
    items = read_accounted(name, data).items
    raw = RawStage(max_document_bytes=MAX_RECORD_BYTES).process(
        pa.Table.from_pylist([part], schema=LANDED_PARTS)
    )
    _check_result("raw_documents", items, raw.kept.num_rows, raw.quarantined)
    extracted = ExtractStage(timeout_s=5.0).process(raw.kept)
    _check_result(
        "extracted_documents", raw.kept.num_rows, extracted.kept.num_rows, extracted.quarantined
    )
    return StageAccounting(
        records=items,
        quarantined=raw.quarantined.num_rows + extracted.quarantined.num_rows,
        kept=extracted.kept.num_rows,
    )


def _check_result(stage: str, records_in: int, kept: int, quarantined: pa.Table) -> None:
    if kept + quarantined.num_rows != records_in:
        raise Unaccounted(
            f"{stage}: {records_in} records in, {kept} kept + {quarantined.num_rows} quarantined"
        )
    for row in quarantined.select(["rule", "reason"]).to_pylist():
        if not row["rule"] or not str(row["reason"] or "").strip():
            raise Unaccounted(f"{stage}: a quarantine row without a rule or reason: {row}")


def manifest_outcome(kind: str, data: bytes) -> str:
    """ "read" or "refused" (ValueError) for `data` as a manifest of `kind` ("landing" or
    "shard set"); any other exception escapes, as it would from the reader."""
    from fm_assets.storage.landing import BatchManifest
    from fm_loader.format.manifest import ShardSetManifest

    try:
        if kind == "landing":
            BatchManifest.from_json(data)
        else:
            ShardSetManifest.from_json(data.decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError included
        if not str(exc).strip():
            raise Unaccounted(f"a {kind} manifest was refused without a reason") from exc
        return "refused"
    return "read"
