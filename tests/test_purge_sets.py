"""Published sets rewritten without purged documents, on sets these tests write with the
platform's own writers (no Ray): packed tokens, image-text pairs and text. What stays reads as
before through the loader's readers, the lineage matches the shards, only touched shards are
written again, the old bytes are gone, and a purge killed between its steps finishes when run
again."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from fm_assets.curation.images.aspect import aspect_bucket
from fm_assets.settings import Settings
from fm_assets.shards import purge_sets
from fm_assets.shards.build import read_shard_set_row, register_shard_set
from fm_assets.shards.lineage import lineage_rows, shard_set_lineage, write_lineage
from fm_assets.shards.packing import PackedSequence, Segment
from fm_assets.shards.pairs import Pair, write_pair_set
from fm_assets.shards.purge_sets import purge_shard_set, purge_text_set
from fm_assets.shards.text_export import write_text_set
from fm_assets.shards.writer import ShardSetHeader, write_shard_set
from fm_assets.storage import catalog
from fm_assets.storage.objectstore import open_object_store
from fm_assets.versions.dataset_version import DatasetVersion
from fm_loader.format.manifest import read_manifest
from fm_loader.format.pair_set import PAIR_MANIFEST_FORMAT_VERSION, PairSet, pair_schema_fingerprint
from fm_loader.format.shard_set import ShardSet
from fm_loader.storage.cache_purge import read_purged
from tests.byte_scan import scan_tree

SEQ_LEN = 16
VOCAB = 1000
PAD = 0
DOCS = {f"{i:064x}": np.arange(1 + 3 * i, 1 + 3 * i + 5 + i, dtype=np.int64) for i in range(1, 9)}
GONE = f"{3:064x}"
# A doc id's bytes are in every sample holding it (the `doc_ids` column): what must go.
NEEDLE = GONE.encode()


def _version(key: str = "web@v1") -> DatasetVersion:
    return DatasetVersion(
        version_key=key,
        dataset="web",
        version=1,
        batches=("b-1",),
        snapshot_ids={"cloud": {}},
        code_versions={},
        tokenizer_hash="t" * 64,
        num_documents=len(DOCS),
        num_tokens=0,
        content_hash="c" * 64,
    )


def _sequences() -> list[PackedSequence]:
    """Documents packed two or three to a sample; the purged one shares samples with others."""
    ids = sorted(DOCS)
    out = []
    for first in range(0, len(ids), 2):
        segments, used = [], 0
        for doc_id in ids[first : first + 2]:
            n = min(len(DOCS[doc_id]), SEQ_LEN - used)
            segments.append(Segment(doc_id, 0, n))
            used += n
        out.append(PackedSequence(tuple(segments)))
    return out


def _token_set(settings: Settings) -> tuple[dict[str, Any], Path]:
    store = open_object_store(settings)
    prefix = "shards/cloud/web/v1/t-s16"
    key = "web@v1/t-s16"
    sequences = _sequences()
    with_tokens = [
        (
            s,
            np.concatenate(
                [DOCS[g.doc_id][g.doc_offset : g.doc_offset + g.length] for g in s.segments]
            ),
        )
        for s in sequences
    ]
    header = ShardSetHeader(key, "web@v1", "c" * 64, "t" * 64)
    manifest = write_shard_set(
        with_tokens,
        store.path(prefix),
        seq_len=SEQ_LEN,
        vocab_size=VOCAB,
        pad_token_id=PAD,
        header=header,
        size_limit_bytes=480,  # one sample per shard
    )
    assert len(manifest.shards) >= 3
    write_lineage(settings, key, lineage_rows(key, sequences), _version())
    register_shard_set(settings, store, key, prefix, "web@v1", "t" * 64, SEQ_LEN, manifest, None)
    row = read_shard_set_row(settings, key)
    assert row is not None
    return row, Path(store.path(prefix))


def _purge_tokens(settings: Settings, row: dict[str, Any]) -> purge_sets.SetPurge | None:
    lineage = shard_set_lineage(settings, str(row["shard_set_key"]), _version())
    return purge_shard_set(settings, row, _version(), lineage, {GONE}, "rev-1", lambda m: None)


def _check_token_set(settings: Settings, directory: Path, key: str) -> None:
    manifest = read_manifest(directory)
    shards = ShardSet(directory, manifest)
    tokens, spans, ids = shards.read_raw(np.arange(len(shards), dtype=np.int64))
    held = {d for sample in ids for d in sample}
    assert GONE not in held and held == set(DOCS) - {GONE}
    for row, (table, sample_ids) in enumerate(zip(spans, ids, strict=True)):
        for doc_id, (start, length, offset) in zip(sample_ids, table.reshape(-1, 3), strict=True):
            assert (
                tokens[row][start : start + length].tolist()
                == DOCS[doc_id][offset : offset + length].tolist()
            )
    lineage = shard_set_lineage(settings, key, _version()).to_pylist()
    from_catalog = sorted(
        (r["sample"], r["doc_id"], r["token_start"], r["token_end"]) for r in lineage
    )
    from_shards = sorted(
        (i, d, int(s), int(s + n))
        for i, (table, sample_ids) in enumerate(zip(spans, ids, strict=True))
        for d, (s, n, _) in zip(sample_ids, table.reshape(-1, 3), strict=True)
    )
    assert from_catalog == from_shards
    assert manifest.num_documents == len(DOCS) - 1


def test_a_token_set_loses_the_document_and_only_its_shards_change(fm_settings: Settings) -> None:
    s = fm_settings
    row, directory = _token_set(s)
    before = read_manifest(directory)
    old_sha = str(row["manifest_sha256"])
    assert scan_tree(directory, [NEEDLE])
    report = _purge_tokens(s, row)
    assert report is not None and report.samples_removed == 0  # its samples held others too
    assert report.shards_rewritten == 1 and report.shards_total == len(before.shards)
    after = read_manifest(directory)
    untouched = {(x.name, x.sha256) for x in before.shards} & {
        (x.name, x.sha256) for x in after.shards
    }
    assert len(untouched) == len(before.shards) - 1  # every other shard kept byte for byte
    _check_token_set(s, directory, str(row["shard_set_key"]))
    assert scan_tree(directory, [NEEDLE]) == []
    new_row = read_shard_set_row(s, str(row["shard_set_key"]))
    assert new_row is not None and new_row["manifest_sha256"] == report.manifest_after
    digest = hashlib.sha256((directory / "fm_manifest.json").read_bytes()).hexdigest()
    assert digest == report.manifest_after
    purged = read_purged(str(directory))
    assert purged is not None and purged.digests == {old_sha}
    assert not (directory / purge_sets.JOURNAL_NAME).exists()
    assert _purge_tokens(s, new_row) is None  # nothing left to purge


def test_a_purge_killed_before_its_lineage_finishes_when_run_again(
    fm_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = fm_settings
    row, directory = _token_set(s)
    original = purge_sets.write_lineage

    def killed(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(purge_sets, "write_lineage", killed)
    with pytest.raises(KeyboardInterrupt):
        _purge_tokens(s, row)
    journal = json.loads((directory / purge_sets.JOURNAL_NAME).read_text())
    assert journal["state"] == "published"  # the new manifest is out; the lineage is the old one
    monkeypatch.setattr(purge_sets, "write_lineage", original)
    # Run again with the set's row and lineage as they are now.
    latest = read_shard_set_row(s, str(row["shard_set_key"]))
    assert latest is not None
    report = _purge_tokens(s, latest)
    assert report is not None
    _check_token_set(s, directory, str(row["shard_set_key"]))
    assert scan_tree(directory, [NEEDLE]) == []


def test_a_text_set_and_a_pair_set(fm_settings: Settings, tmp_path: Path) -> None:
    s = fm_settings
    store = open_object_store(s)
    prefix = "texts/cloud/web/v1"
    texts = [(d, f"text of {d[-2:]} " * 20) for d in sorted(DOCS)]
    write_text_set(
        texts,
        Path(store.path(prefix)),
        text_set_key="web@v1",
        version_content_hash="c" * 64,
        size_limit_bytes=600,
    )
    data = (Path(store.path(prefix)) / "fm_text_manifest.json").read_bytes()
    text_row = {
        "version_key": "web@v1",
        "uri": store.uri(prefix),
        "manifest_sha256": hashlib.sha256(data).hexdigest(),
        "num_documents": len(texts),
        "num_bytes": 0,
        "run_id": None,
        "created_at": dt.datetime.now(dt.UTC),
    }
    catalog.append_rows(s, "text_sets", pa.Table.from_pylist([text_row]))
    row = {"version_key": "web@v1", "uri": store.uri(prefix)}
    report = purge_text_set(s, row, {GONE}, "rev-1", lambda m: None)
    assert report is not None and report.samples_removed == 1
    assert scan_tree(Path(store.path(prefix)), [NEEDLE]) == []
    manifest = json.loads((Path(store.path(prefix)) / "fm_text_manifest.json").read_text())
    assert manifest["num_documents"] == len(texts) - 1
    assert manifest["num_bytes"] == sum(len(t.encode()) for d, t in texts if d != GONE)
    assert purge_text_set(s, row, {f"{99:064x}"}, "rev-2", lambda m: None) is None

    # Pairs: one per sample, in aspect buckets; the purged pair's sample goes.
    pairs_dir = Path(store.path("shards/cloud/pairs/v1/t-s16"))
    pairs_dir.mkdir(parents=True)
    bucket = aspect_bucket(64, 64).index
    pairs = [
        Pair(d, DOCS[d][:SEQ_LEN], hashlib.sha256(d.encode()).digest() * 4, 64, 64, bucket)
        for d in sorted(DOCS)
    ]
    fields = {
        "format_version": PAIR_MANIFEST_FORMAT_VERSION,
        "shard_set_key": "pairs@v1/t-s16",
        "source_version": "pairs@v1",
        "version_content_hash": "c" * 64,
        "tokenizer_hash": "t" * 64,
        "vocab_size": VOCAB,
        "token_dtype": "uint16",
        "pad_token_id": PAD,
        "seq_len": SEQ_LEN,
        "schema_fingerprint": pair_schema_fingerprint("uint16"),
        "pipeline_version": "1",
        "created_at": "2025-01-01T00:00:00+00:00",
        "image_format": "jpeg",
        "max_side": 64,
    }
    before = write_pair_set(pairs, pairs_dir, fields, "uint16", 300)
    key = "pairs@v1/t-s16"
    version = _version("pairs@v1")
    write_lineage(
        s,
        key,
        lineage_rows(key, [PackedSequence((Segment(p.doc_id, 0, len(p.tokens)),)) for p in pairs]),
        version,
    )
    register_shard_set(
        s, store, key, "shards/cloud/pairs/v1/t-s16", "pairs@v1", "t" * 64, SEQ_LEN, before, None
    )
    row = read_shard_set_row(s, key)
    assert row is not None
    gone_image = hashlib.sha256(GONE.encode()).digest() * 4
    assert scan_tree(pairs_dir, [gone_image])
    lineage = shard_set_lineage(s, key, version)
    report = purge_shard_set(s, row, version, lineage, {GONE}, "rev-1", lambda m: None)
    assert report is not None and report.samples_removed == 1
    assert scan_tree(pairs_dir, [gone_image, NEEDLE]) == []
    after = read_manifest(pairs_dir)
    assert after.num_samples == len(pairs) - 1
    raw = PairSet(pairs_dir, after).read_raw(np.arange(after.num_samples, dtype=np.int64))
    assert GONE not in raw.doc_ids and len(set(raw.doc_ids)) == len(pairs) - 1


def test_a_node_cache_drops_its_copy_of_a_purged_set_at_the_next_open(
    fm_settings: Settings, tmp_path: Path
) -> None:
    """The cache keyed by manifest sha256 (open_cached: what make_dataset and pre-warm call for
    a remote set; here the set's directory stands in for the bucket)."""
    from fm_loader.storage.cache import open_cached

    s = fm_settings
    row, directory = _token_set(s)
    cache = tmp_path / "node-cache"
    old_sha = str(row["manifest_sha256"])
    first = open_cached(str(directory), old_sha, cache_dir=cache, s3_endpoint=None)
    first.pin.close()
    assert scan_tree(cache, [NEEDLE])
    report = _purge_tokens(s, row)
    assert report is not None and report.manifest_after is not None
    assert (cache / old_sha).is_dir()  # nothing touches a node's cache until the set is opened
    again = open_cached(str(directory), report.manifest_after, cache_dir=cache, s3_endpoint=None)
    again.pin.close()
    assert not (cache / old_sha).exists() and (cache / report.manifest_after).is_dir()
    assert scan_tree(cache, [NEEDLE]) == []
    with pytest.raises(ValueError, match="was purged"):
        open_cached(str(directory), old_sha, cache_dir=cache, s3_endpoint=None)
