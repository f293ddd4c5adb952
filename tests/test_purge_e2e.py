"""A purge end to end: a planted string leaves no byte anywhere.

Two text batches on the session's Ray: the first lands a JSON-lines file whose second document
starts with a unique string (the planted document) among documents that stay; the second lands
the planted document's exact bytes again, alone in a text file (exact dedup quarantines it as a
duplicate of the first batch's). A version over both, a shard set of small shards, its text set
and a node cache holding a copy of the shard set; then `fm revoke --doc ID --purge`, killed in
the middle of its tables, and `fm purge REVOCATION_ID` run again to finish it.

Afterwards every byte under FM_HOME (the object store and the warehouse are in it) is searched,
inside every Parquet value, Avro block, gzip member, tar member and MDS shard, for the string,
its first 12 characters (what a manifest's bounds could keep) and runs of its token ids (as the
shards' uint16 and the tables' int32): found nowhere. The document's id is left only in the
records of what was revoked and purged (not in quarantine rows or the dedup indexes). The old
version still reads, without the planted document, and is marked purged; `fm verify` passes for
both versions; the checks recount; the JSON-lines file keeps its other documents at their
offsets and records the excision, the text file is gone; the audit says who, when, what and how
many bytes; the node cache dropped its copy of the purged set at its next open.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from tokenizers import Tokenizer

from fm_assets.checks.documents import records_accounted_for
from fm_assets.checks.versions import version_counts_match
from fm_assets.commands import operations
from fm_assets.commands.cli import main
from fm_assets.registries.tokenizers import register_tokenizer
from fm_assets.settings import Settings, load_settings
from fm_assets.shards import purge as purge_module
from fm_assets.shards.build import build_shard_set, read_shard_set_row
from fm_assets.shards.text_export import export_text_set
from fm_assets.storage.landing import read_manifest as read_landing_manifest
from fm_assets.storage.objectstore import open_object_store
from fm_assets.storage.purge.landing_files import BLANKED, DELETED, read_record
from fm_assets.storage.purge.records import read_plan, read_purges, version_purged
from fm_assets.versions.dataset_version import create_version, require_version
from fm_assets.versions.reader import version_documents
from fm_loader.storage.cache import open_cached
from tests.byte_scan import Found, scan_tree
from tests.conftest import NEOX_TOKENIZER
from tests.policies import opt_out_policy

pytestmark = pytest.mark.slow

PLANTED = "Xq7zPurgeCanary-5be1f3a9d2c04e77"
PLANTED_TEXT = (
    f"{PLANTED} opens the private letter the licensor asked us to take back. It describes a "
    "garden behind a stone house, the apple trees planted by a grandmother, and the long "
    "summer evenings spent reading under them while the light faded over the hills."
)
KEPT = [
    "The harbour town wakes early: fishing boats return before dawn, the market opens at six "
    "and by noon the smell of grilled sardines drifts along the quay past the old customs house.",
    "A short guide to sourdough: feed the starter twice a day, keep the dough warm, fold it "
    "every half hour for two hours, then let it rise slowly overnight in a cool kitchen.",
    "The committee met on Tuesday to review the budget for the new library wing, which adds a "
    "reading room, a children's corner and a small auditorium for lectures and concerts.",
]
OTHER = [
    "Mountain railways were built in the nineteenth century to carry tourists to viewpoints "
    "that had taken a full day of walking to reach, and several of them still run today.",
    "Tide pools hold small worlds: anemones, hermit crabs and periwinkles survive the hours "
    "between tides in rock hollows that the sea fills again twice every day.",
]


@dataclass
class Home:
    settings: Settings
    root: Path
    first: str  # batch with the JSON-lines file
    second: str  # batch with the planted document's copy
    doc_id: str
    shard_dir: Path
    shard_set_key: str
    old_manifest: str  # the shard set's manifest before the purge (the node cache holds it)
    cache: Path


@pytest.fixture(scope="module")
def home(ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Home]:
    root = tmp_path_factory.mktemp("purge")
    fm_home = root / "fm"
    saved = {k: os.environ.get(k) for k in ("FM_HOME", "DAGSTER_HOME", "FM_POLICY_FILE", "FM_USER")}
    os.environ["FM_HOME"] = str(fm_home)
    os.environ["DAGSTER_HOME"] = str(fm_home / "dagster")
    os.environ["FM_POLICY_FILE"] = str(opt_out_policy(root / "policy"))
    os.environ["FM_USER"] = "legal-team"
    settings = load_settings()
    info = register_tokenizer(settings, NEOX_TOKENIZER, make_default=True)
    inputs = root / "inputs"
    inputs.mkdir()
    notes = inputs / "notes.jsonl"
    lines = [KEPT[0], PLANTED_TEXT, *KEPT[1:]]
    notes.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(lines)))
    (inputs / "copy.txt").write_bytes(PLANTED_TEXT.encode())
    (inputs / "other.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in OTHER))
    first, _ = operations.land(settings, [notes], source="letters", license="CC-BY-4.0")
    operations.run_batch(settings, first.batch_id, lambda message: None)
    second, _ = operations.land(
        settings, [inputs / "copy.txt", inputs / "other.jsonl"], source="web", license="MIT"
    )
    operations.run_batch(settings, second.batch_id, lambda message: None)
    version, _ = create_version(settings, "web@v1", None, run_id=None)
    build = build_shard_set(settings, version.version_key, info, 64, shard_size_bytes=600)
    assert len(build.manifest.shards) >= 3, "the test needs shards the purge leaves alone"
    export_text_set(settings, version.version_key, size_limit_bytes=1 << 10)
    doc_id = hashlib.sha256(PLANTED_TEXT.encode()).hexdigest()
    # A node's cache holding the set (what `fm cache prewarm` and make_dataset open; the set's
    # directory stands in for the bucket).
    row = read_shard_set_row(settings, build.manifest.shard_set_key)
    assert row is not None
    cache = fm_home / "node-cache"
    shard_dir = Path(build.uri.removeprefix("file://"))
    old_manifest = str(row["manifest_sha256"])
    open_cached(str(shard_dir), old_manifest, cache_dir=cache, s3_endpoint=None).pin.close()
    yield Home(
        settings,
        fm_home,
        first.batch_id,
        second.batch_id,
        doc_id,
        shard_dir,
        build.manifest.shard_set_key,
        old_manifest,
        cache,
    )
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _cli(*args: str, fails: bool = False) -> str:
    result = CliRunner().invoke(main, list(args))
    assert (result.exit_code != 0) == fails, result.output
    return result.output


def _needles() -> list[bytes]:
    """The planted string, its first 12 characters, and runs of 5 of its token ids as the shards
    (uint16) and the tables (int32) hold them."""
    ids = (
        Tokenizer.from_file(str(NEOX_TOKENIZER)).encode(PLANTED_TEXT, add_special_tokens=False).ids
    )
    runs = [ids[i : i + 5] for i in range(0, len(ids) - 5, 5)]
    return [
        PLANTED.encode(),
        PLANTED[:12].encode(),
        *(np.asarray(r, "<u2").tobytes() for r in runs),
        *(np.asarray(r, "<i4").tobytes() for r in runs),
    ]


def _table_of(found: Found, root: Path) -> str:
    """`namespace.table` for a hit inside the warehouse, else the hit's path under FM_HOME."""
    relative = found.where.removeprefix(str(root) + "/")
    parts = relative.split("/")
    if parts[0] == "warehouse" and len(parts) > 2:
        return f"{parts[1]}.{parts[2]}"
    return relative


@dataclass
class Purged:
    home: Home
    revocation_id: str
    text_before: list[Found]
    ids_before: list[Found]
    killed_output: str
    output: str
    docs_before: list[str]


@pytest.fixture(scope="module")
def purged(home: Home) -> Purged:
    """`fm revoke --purge` killed in the middle of its tables, then `fm purge` finishing it."""
    s = home.settings
    text_before = scan_tree(home.root, _needles())
    ids_before = scan_tree(home.root, [home.doc_id.encode()])
    v1 = require_version(s, "web@v1")
    docs_before = version_documents(s, v1, v1.pipeline.final, ("doc_id",))["doc_id"].to_pylist()
    real = purge_module.purge_table
    calls = []

    def dies_at_the_fourth_table(*args: object, **kwargs: object) -> object:
        calls.append(args[1])
        if len(calls) == 4:
            raise RuntimeError("killed in the middle of the tables")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(purge_module, "purge_table", dies_at_the_fourth_table)
        killed = _cli(
            "revoke",
            "--doc",
            home.doc_id,
            "--reason",
            "the licensor withdrew it",
            "--purge",
            fails=True,
        )
    assert "killed in the middle of the tables" in killed, killed
    assert "version web@v1 -> web@v2" in killed
    (revocation_id,) = [
        line.split()[1] for line in killed.splitlines() if line.startswith("revocation ")
    ]
    # Killed midway: the sets are rewritten, three tables too, the landed files untouched.
    assert len(calls) == 4
    row = read_shard_set_row(s, home.shard_set_key)
    assert row is not None and str(row["manifest_sha256"]) != home.old_manifest
    store = open_object_store(s)
    copy = next(f for f in read_landing_manifest(store, home.second).files if f.name == "copy.txt")
    assert store.exists(copy.key)
    output = _cli("purge", revocation_id)
    # The node's next open of the set (what make_dataset and pre-warm call).
    open_cached(
        str(home.shard_dir), str(row["manifest_sha256"]), cache_dir=home.cache, s3_endpoint=None
    ).pin.close()
    return Purged(home, revocation_id, text_before, ids_before, killed, output, docs_before)


def test_no_byte_of_the_document_remains(purged: Purged) -> None:
    root = purged.home.root
    where = {f.where for f in purged.text_before}
    # Planted everywhere a document goes: landed files, tables (text and token ids), the shard
    # set's shards, the text set, the node cache's copy of the shard set.
    for part in ("/landing/", "/warehouse/", "/shards/", "/texts/", "/node-cache/"):
        assert any(part in w for w in where), (part, sorted(where))
    assert any("tokenized_documents" in w for w in where)
    found = scan_tree(root, _needles())
    assert found == [], "\n".join(f"{f.where}: {f.needle!r}" for f in found)


# Where a purged document's id (a sha256 of its bytes, no content) may stay: the record of what
# was revoked and purged, the cards' revocation tables, the runs' logs of `fm revoke`, and the
# landing manifest and purge record of the batch whose file was the document, byte for byte
# (the file's sha256 is the document's id).
RECORD_TABLES = {
    "fm.revocations",
    "fm.purges",
    "fm_cloud.purged_documents",
    "fm_cloud.version_exclusions",
}


def _a_record(where: str, second: str) -> bool:
    return (
        where in RECORD_TABLES
        or where.startswith("dagster/history/runs/")
        or where.endswith("/dataset_card.md")
        or where.startswith(f"objects/landing/batches/{second}/")
    )


def test_quarantine_rows_and_the_dedup_indexes_lose_the_document(purged: Purged) -> None:
    root = purged.home.root
    before = {_table_of(f, root) for f in purged.ids_before}
    for table in ("quarantine", "document_index", "neardup_index", "tokenized_documents"):
        assert f"fm_cloud.{table}" in before, sorted(before)
    assert any(w.startswith("objects/shards/") for w in before), sorted(before)
    after = {_table_of(f, root) for f in scan_tree(root, [purged.home.doc_id.encode()])}
    assert after, "the record of the purge names the document"
    left = sorted(w for w in after if not _a_record(w, purged.home.second))
    assert left == [], left


def test_the_old_version_reads_without_the_document_and_is_marked(purged: Purged) -> None:
    s, home = purged.home.settings, purged.home
    assert home.doc_id in purged.docs_before
    v1 = require_version(s, "web@v1")
    after = version_documents(s, v1, v1.pipeline.final, ("doc_id", "num_tokens"))
    assert sorted(after["doc_id"].to_pylist()) == sorted(
        d for d in purged.docs_before if d != home.doc_id
    )
    v2 = require_version(s, "web@v2")
    assert version_documents(s, v2, v2.pipeline.final, ("doc_id",)).num_rows == after.num_rows
    documents, tokens = version_purged(s, "web@v1")
    assert documents == 1 and tokens > 0
    assert "version web@v1: still readable, without the purged documents" in purged.output
    for version in (v1, v2):
        assert version_counts_match(s, version).passed
    for batch in (home.first, home.second):
        for stage in ("raw_documents", "tokenized_documents"):
            outcome = records_accounted_for(s, stage, batch)
            assert outcome.passed, outcome.description
    _cli("verify", "web@v1")
    _cli("verify", "web@v2")


def test_a_file_covered_whole_is_deleted_a_larger_one_records_the_excision(
    purged: Purged,
) -> None:
    s, home = purged.home.settings, purged.home
    assert f"landed {home.first}/notes.jsonl: {BLANKED}" in purged.output
    assert f"landed {home.second}/copy.txt: {DELETED}" in purged.output
    store = open_object_store(s)
    # The JSON-lines file keeps its other documents byte for byte, at their offsets.
    (landed,) = read_landing_manifest(store, home.first).files
    data = store.read_bytes(landed.key)
    lines = data.split(b"\n")
    assert lines[1].strip() == b"" and len(lines[1]) > 100
    assert [json.loads(x)["text"] for x in lines if x.strip()] == KEPT
    first = read_record(store, home.first, purged.revocation_id)
    assert first is not None and first.state == "done"
    (notes,) = first.files
    assert (notes.name, notes.outcome, notes.records) == ("notes.jsonl", BLANKED, 1)
    assert (
        notes.size_after == landed.size and notes.sha256_after == hashlib.sha256(data).hexdigest()
    )
    # The planted copy's file goes whole; the other file of that batch stays as landed.
    files = {f.name: f for f in read_landing_manifest(store, home.second).files}
    assert not store.exists(files["copy.txt"].key)
    kept = store.read_bytes(files["other.jsonl"].key)
    assert hashlib.sha256(kept).hexdigest() == files["other.jsonl"].sha256
    second = read_record(store, home.second, purged.revocation_id)
    assert second is not None
    assert [(f.name, f.outcome) for f in second.files] == [("copy.txt", DELETED)]
    # Each purged record names what became of its landed bytes.
    plan = read_plan(s, "cloud", purged.revocation_id).to_pylist()
    assert sorted((r["batch_id"], r["source_file"]) for r in plan) == sorted(
        [(home.first, "notes.jsonl"), (home.second, "copy.txt")]
    )
    assert all(str(r["landing"]).startswith((BLANKED, DELETED)) for r in plan)


def test_the_audit_says_who_when_what_and_how_many_bytes(purged: Purged) -> None:
    home = purged.home
    (audit,) = [r for r in read_purges(home.settings) if r["revocation_id"] == purged.revocation_id]
    assert audit["purged_by"] == "legal-team"
    assert (audit["criterion"], audit["value"]) == ("doc", home.doc_id)
    assert audit["started_at"] <= audit["finished_at"]
    assert audit["documents"] == 2  # the first batch's document and the second's copy
    assert audit["bytes_removed"] > 0 and audit["rows_removed"] > 0
    assert "document ids" in str(audit["remaining"])
    # Finishing the killed run: said, and the counts are this run's (the rows left after the
    # tables the killed run rewrote).
    assert json.loads(str(audit["details"]))["resumed"] is True
    assert "finished one that was killed" in str(audit["remaining"])
    assert f"purged {purged.revocation_id}: 2 documents" in purged.output


def test_the_node_cache_dropped_its_copy_of_the_purged_set(purged: Purged) -> None:
    home = purged.home
    entries = {p.name for p in home.cache.iterdir() if not p.name.startswith(".")}
    assert home.old_manifest not in entries
    row = read_shard_set_row(home.settings, home.shard_set_key)
    assert row is not None and str(row["manifest_sha256"]) in entries
    with pytest.raises(ValueError, match="was purged"):
        open_cached(str(home.shard_dir), home.old_manifest, cache_dir=home.cache, s3_endpoint=None)
