"""Bad input never crashes a batch: every unreadable file or record gets a quarantine row."""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path

import pytest

from fm_assets.commands import operations
from fm_assets.execution import pipeline
from fm_assets.registries.tokenizers import register_tokenizer
from fm_assets.settings import load_settings
from fm_assets.storage import catalog
from tests.paths import NEOX_TOKENIZER, WARC_DIR
from tests.policies import opt_out_policy

pytestmark = pytest.mark.slow


def _make_bad_files(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    latin1 = directory / "latin1.jsonl"
    latin1.write_bytes(
        b'{"id": "ok", "text": "A perfectly fine line of text about rivers."}\n'
        + '{"id": "bad", "text": "caf\u00e9 cr\u00e8me"}\n'.encode("latin-1")
        + b'{"id": "broken", "text": \n'
        + b'{"id": "no-text", "title": "nothing"}\n'
    )
    empty = directory / "empty.txt"
    empty.write_bytes(b"")
    binary = directory / "blob.bin"
    binary.write_bytes(random.Random(5).randbytes(64 * 1024))
    huge = directory / "huge.txt"
    line = b"one enormous single document line without any newline at all " * 16
    with huge.open("wb") as f:
        for _ in range((50 << 20) // len(line) + 1):
            f.write(line)
    return [latin1, empty, binary, huge]


def test_bad_input_is_quarantined_with_reasons(
    ray_session: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "fm"
    monkeypatch.setenv("FM_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    # The subject is unreadable input, not curation: the Japanese pages must reach the tables.
    monkeypatch.setenv("FM_POLICY_FILE", str(opt_out_policy(tmp_path)))
    settings = load_settings()
    register_tokenizer(settings, NEOX_TOKENIZER, make_default=True)
    edge = sorted((WARC_DIR / "edge").iterdir())
    wet = WARC_DIR / "cc-main-2024-22-whirlwind.warc.wet.gz"
    files = [*edge, wet, *_make_bad_files(tmp_path / "bad")]
    batch, _ = operations.land(settings, files, source="edge-cases", license="Apache-2.0")

    operations.run_batch(settings, batch.batch_id, lambda message: None)  # raises on a failed check

    quarantine = catalog.read_batch(settings, "quarantine", batch.batch_id).to_pylist()
    raw = catalog.read_batch(settings, "raw_documents", batch.batch_id, columns=("source_file",))
    for row in quarantine:
        assert row["rule"] and row["reason"] and row["code_version"] and row["stage"]
    rules = Counter(r["rule"] for r in quarantine)
    for rule in ("empty_file", "binary_file", "invalid_utf8", "invalid_json", "document_too_large"):
        assert rules[rule] >= 1, f"no {rule} in {dict(rules)}"
    # Every file is accounted for: it produced documents, quarantine rows, or both.
    seen = set(raw.column("source_file").to_pylist()) | {r["source_file"] for r in quarantine}
    assert {f.name for f in files} <= seen
    # The damaged archive still gave up its readable record (a byte-identical copy of the page
    # in warcio-example.warc.gz, so exact dedup quarantines it) and a row for the damage.
    truncated = Counter(
        r["rule"] for r in quarantine if r["source_file"] == "warcio-truncated.warc"
    )
    assert truncated == {"exact_duplicate": 1, "invalid_warc_record": 1}
    kept_files = Counter(raw.column("source_file").to_pylist())
    assert kept_files["cc-main-2024-22-whirlwind.warc.wet.gz"] >= 1
    assert kept_files["clueweb09-warc018-eucjp.warc.gz"] >= 20
    # WARC/0.18 pages declared EUC-JP come out of extraction as Japanese text.
    extracted = catalog.read_batch(settings, "extracted_documents", batch.batch_id).to_pylist()
    japanese = [
        r["text"]
        for r in extracted
        if r["source_file"] == "clueweb09-warc018-eucjp.warc.gz"
        and any("\u3040" <= ch <= "\u30ff" for ch in r["text"])
    ]
    assert len(japanese) >= 10
    tagged = catalog.read_batch(settings, "language_tagged_documents", batch.batch_id).to_pylist()
    assert sum(r["language"] == "ja" for r in tagged) >= 10
    # Downstream stages saw only readable documents, and the batch reached tokenization.
    final = catalog.read_batch(
        settings, pipeline.STAGE_NAMES[-1], batch.batch_id, columns=("doc_id",)
    )
    assert final.num_rows >= 1
    assert os.path.getsize(files[-1]) >= 50 << 20
