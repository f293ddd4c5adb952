"""Provenance and revocation end to end, on the shared WARCs with the real GPT-NeoX tokenizer.

Two landing batches (wget pages and Common Crawl pages, under different sources and licences)
are processed, cut into web@v1 and packed into small shards, so a revocation can touch some
shards and leave others. The sample lineage is checked against the shards themselves and the raw
bytes; revocations are checked by what a trainer sees.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pytest
from click.testing import CliRunner

from fm_assets.cards.data import read_card_data
from fm_assets.commands import operations
from fm_assets.commands.cli import main
from fm_assets.defs.materialize import shard_set_partition
from fm_assets.execution.pipeline import STAGE_NAMES
from fm_assets.registries.tokenizers import TokenizerInfo, register_tokenizer
from fm_assets.settings import Settings, load_settings
from fm_assets.shards.build import build_shard_set, read_shard_set_row
from fm_assets.shards.trace import versions_holding
from fm_assets.storage import catalog
from fm_assets.storage.objectstore import open_object_store
from fm_assets.versions.dataset_version import create_version, require_version
from fm_assets.versions.reader import version_documents, version_text_documents
from fm_loader import make_dataset
from fm_loader.format.manifest import read_manifest
from fm_loader.format.shard_set import ShardSet
from tests.conftest import NEOX_TOKENIZER, WARC_DIR
from tests.policies import opt_out_policy

pytestmark = pytest.mark.slow

SEQ_LEN = 256
SHARD_BYTES = 24 << 10  # small shards, so a revocation leaves most of them untouched


@dataclass
class Built:
    settings: Settings
    tokenizer: TokenizerInfo
    wget_batch: str
    cc_batch: str
    shard_set_key: str
    directory: Path


def _cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _materialized(instance: dg.DagsterInstance, asset: str, partition: str) -> dg.EventLogRecord:
    """The latest materialization of one partition of an asset in the Dagster instance."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1
    ).records
    assert records, f"{asset} partition {partition} was never materialized"
    return records[0]


def _checks(instance: dg.DagsterInstance, asset: str, partition: str) -> dict[str, bool]:
    """Check name -> passed, as the run that materialized the partition evaluated them."""
    run_id = _materialized(instance, asset, partition).run_id
    events = instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
    evaluations = [e.dagster_event.asset_check_evaluation_data for e in events if e.dagster_event]
    return {e.check_name: e.passed for e in evaluations}


def _shard_docs(directory: Path) -> list[list[str]]:
    """Doc ids of every sample, read from the shards themselves."""
    shards = ShardSet(directory, read_manifest(directory))
    _, _, doc_ids = shards.read_raw(np.arange(len(shards), dtype=np.int64))
    return doc_ids


@pytest.fixture(scope="module")
def built(ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    home = tmp_path_factory.mktemp("provenance") / "fm"
    saved = {k: os.environ.get(k) for k in ("FM_HOME", "DAGSTER_HOME", "FM_POLICY_FILE")}
    os.environ["FM_HOME"] = str(home)
    os.environ["DAGSTER_HOME"] = str(home / "dagster")
    # The subject is provenance: the Common Crawl batch's non-English pages must get through.
    os.environ["FM_POLICY_FILE"] = str(opt_out_policy(home.parent))
    settings = load_settings()
    info = register_tokenizer(settings, NEOX_TOKENIZER, make_default=True)
    wget, _ = operations.land(
        settings, sorted(WARC_DIR.glob("wget-sample-*.warc.gz")), source="wget", license="MIT"
    )
    cc, _ = operations.land(
        settings,
        [WARC_DIR / "cc-main-2020-34-sample.warc.gz"],
        source="commoncrawl",
        license="CC-BY-4.0",
    )
    for batch in (wget, cc):
        operations.run_batch(settings, batch.batch_id, lambda message: None)
    version, _ = create_version(settings, "web@v1", None, run_id=None)
    build = build_shard_set(
        settings, version.version_key, info, SEQ_LEN, shard_size_bytes=SHARD_BYTES
    )
    assert len(build.manifest.shards) >= 4, "the test needs several shards"
    key = build.manifest.shard_set_key
    yield Built(
        settings, info, wget.batch_id, cc.batch_id, key, Path(build.uri.removeprefix("file://"))
    )
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def test_lineage_table_matches_the_shards(built: Built) -> None:
    """Every sample's catalog lineage names exactly the documents and spans the shard holds."""
    shards = ShardSet(built.directory, read_manifest(built.directory))
    _, spans, doc_ids = shards.read_raw(np.arange(len(shards), dtype=np.int64))
    rows = catalog.read_table(
        built.settings,
        "sample_documents",
        catalog.where_equal("shard_set_key", built.shard_set_key),
        namespace="cloud",
    ).to_pylist()
    from_catalog: dict[int, list[tuple[str, int, int, int]]] = {}
    for r in sorted(rows, key=lambda r: (r["sample"], r["token_start"])):
        from_catalog.setdefault(r["sample"], []).append(
            (r["doc_id"], r["token_start"], r["token_end"] - r["token_start"], r["doc_offset"])
        )
    assert len(from_catalog) == len(shards)
    for sample, (ids, table) in enumerate(zip(doc_ids, spans, strict=True)):
        triples = table.reshape(-1, 3).tolist()
        expected = [(d, s, n, o) for d, (s, n, o) in zip(ids, triples, strict=True)]
        assert from_catalog[sample] == expected


def test_a_random_sample_leads_back_to_its_raw_bytes(built: Built) -> None:
    s = built.settings
    manifest = read_manifest(built.directory)
    index = random.Random(7).randrange(manifest.num_samples)
    docs = _json_lines(_cli("lineage", "sample", built.shard_set_key, str(index)))
    assert docs
    shards = ShardSet(built.directory, manifest)
    tokens, _, ids = shards.read_raw(np.array([index], dtype=np.int64))
    assert [d["doc_id"] for d in docs] == ids[0]
    version = require_version(s, "web@v1")
    stored = version_documents(s, version, "tokenized_documents", ("doc_id", "tokens"))
    doc_tokens = dict(
        zip(stored.column("doc_id").to_pylist(), stored.column("tokens").to_pylist(), strict=True)
    )
    for doc in docs:
        raw = catalog.read_table(
            s,
            "raw_documents",
            catalog.where_equal("doc_id", str(doc["doc_id"])),
            namespace=doc["namespace"],
        ).to_pylist()[0]
        assert hashlib.sha256(raw["raw_content"]).hexdigest() == doc["raw_sha256"]
        assert doc["batch_id"] in (built.wget_batch, built.cc_batch)
        assert doc["source_file"] == raw["source_file"] and doc["record_id"] == raw["record_id"]
        assert (doc["source"], doc["license"]) in {("wget", "MIT"), ("commoncrawl", "CC-BY-4.0")}
        assert doc["namespace"] == raw["namespace"]
        assert isinstance(doc["record_index"], int)
        # The record's own bytes in the landed WARC: its gzip member starts at record_offset.
        landed = (WARC_DIR / str(doc["source_file"])).read_bytes()
        member = zlib.decompressobj(16 + zlib.MAX_WBITS)
        head = member.decompress(landed[int(doc["record_offset"]) :], 1 << 16)
        assert f"WARC-Record-ID: {doc['warc_record_id']}".encode() in head.split(b"\r\n\r\n")[0]
        assert doc["record_line"] is None
        assert set(doc["code_versions"]) >= {"raw_documents", "tokenized_documents"}
        # The span inside the sample holds exactly those tokens of the document.
        start, end, offset = (
            int(doc["token_start"]),
            int(doc["token_end"]),
            int(doc["doc_token_offset"]),
        )
        assert (
            tokens[0][start:end].tolist()
            == doc_tokens[doc["doc_id"]][offset : offset + end - start]
        )


def test_a_document_leads_forward_to_every_sample_holding_it(built: Built) -> None:
    samples = _shard_docs(built.directory)
    # A document long enough to span several samples.
    counts: dict[str, int] = {}
    for ids in samples:
        for doc_id in ids:
            counts[doc_id] = counts.get(doc_id, 0) + 1
    doc_id = max(counts, key=lambda d: (counts[d], d))
    places = _json_lines(_cli("lineage", "doc", doc_id))
    assert {p["sample"] for p in places} == {i for i, ids in enumerate(samples) if doc_id in ids}
    assert {(p["version"], p["shard_set"]) for p in places} == {("web@v1", built.shard_set_key)}


def test_revocation_end_to_end(built: Built, tmp_path: Path) -> None:
    s = built.settings
    old_docs = set(
        version_documents(s, require_version(s, "web@v1"), "tokenized_documents", ("doc_id",))
        .column("doc_id")
        .to_pylist()
    )

    # A trainer names its run; rank 0 records it, with the position of each checkpoint.
    dataset = make_dataset("web@v1", rank=0, world_size=1, run_id="may-5-run", settings=s)
    for _, _ in zip(range(5), iter(dataset), strict=False):
        pass
    dataset.state_dict()
    run = _json_lines(_cli("lineage", "run", "may-5-run"))
    assert len(run) == 1
    assert run[0]["version"] == "web@v1" and run[0]["shard_set"] == built.shard_set_key
    assert run[0]["position"] == 5
    assert run[0]["snapshot_ids"] == require_version(s, "web@v1").snapshot_ids
    assert "may-5-run" in _json_lines(_cli("lineage", "doc", sorted(old_docs)[0]))[0]["runs"]

    # Revoke one document that sits in a single shard.
    samples = _shard_docs(built.directory)
    manifest = read_manifest(built.directory)
    bounds = np.cumsum([0] + [x.samples for x in manifest.shards])
    shard_of: dict[str, set[int]] = {d: set() for ids in samples for d in ids}
    for i, ids in enumerate(samples):
        for d in ids:
            shard_of[d].add(int(np.searchsorted(bounds, i, side="right") - 1))
    revoked = sorted(d for d, where in shard_of.items() if len(where) == 1)[0]
    out = _cli("revoke", "--doc", revoked, "--reason", "licensor asked")
    assert "version web@v1 -> web@v2 (1 documents" in out
    assert "run may-5-run read revoked shard set" in out
    new_key = built.shard_set_key.replace("web@v1", "web@v2")
    line = next(x for x in out.splitlines() if x.startswith("shard_set "))
    assert f"-> {new_key}" in line and f"1 of {len(manifest.shards)} shards" in line

    # Through Dagster: the revocation is a partition of its asset, and the replacement version
    # and shard set are partitions materialized with their blocking checks, all passing.
    revocation_id = out.splitlines()[0].removeprefix("revocation ")
    instance = operations.dagster_instance(s)
    assert revocation_id in instance.get_dynamic_partitions("revocation")
    assert "web@v2" in instance.get_dynamic_partitions("dataset_version")
    recorded = _materialized(instance, "revocation", revocation_id).asset_materialization
    assert recorded is not None
    assert recorded.metadata["versions"].value == {"web@v1": "web@v2"}
    assert recorded.metadata["shard_sets"].value == {built.shard_set_key: new_key}
    assert recorded.metadata["reason"].value == "licensor asked"
    assert recorded.metadata["documents_removed"].value == 1
    assert _checks(instance, "dataset_version", "web@v2") == {"version_counts_match": True}
    partition = shard_set_partition("web@v2", new_key.split("/", 1)[1])
    assert _checks(instance, "shard_set", partition) == {
        "shard_checksums_valid": True,
        "token_counts_match_version": True,
        "samples_carry_provenance": True,
        "no_contaminated_samples": True,
    }

    # The old version is refused, naming the reason and the replacement; audits may read it.
    with pytest.raises(ValueError, match=r"revoked: licensor asked.*web@v2"):
        make_dataset("web@v1", rank=0, world_size=1, settings=s)
    assert (
        len(make_dataset("web@v1", rank=0, world_size=1, settings=s, allow_revoked=True))
        == manifest.num_samples
    )

    with pytest.raises(ValueError, match=r"web@v1 is revoked .*build web@v2 instead"):
        build_shard_set(s, "web@v1", built.tokenizer, 2 * SEQ_LEN)

    # The new version lacks exactly the revoked document, in the catalog and in its shards.
    v2 = require_version(s, "web@v2")
    new_docs = set(
        version_documents(s, v2, "tokenized_documents", ("doc_id",)).column("doc_id").to_pylist()
    )
    assert new_docs == old_docs - {revoked} and v2.num_documents == len(new_docs)
    new_row = read_shard_set_row(s, new_key)
    assert new_row is not None
    new_dir = Path(str(new_row["uri"]).removeprefix("file://"))
    assert {d for ids in _shard_docs(new_dir) for d in ids} == {
        d for ids in samples for d in ids
    } - {revoked}
    new_manifest = read_manifest(new_dir)
    changed = [
        a.name
        for a, b in zip(manifest.shards, new_manifest.shards, strict=True)
        if a.sha256 != b.sha256
    ]
    assert len(changed) == 1
    # The replacement keeps its base's namespaces, beside its shards too.
    served = make_dataset("web@v2", rank=0, world_size=1, settings=s, namespaces={"cloud"})
    assert sum(1 for _ in served) == new_manifest.num_samples  # every checksum verified
    card = open_object_store(s).read_bytes("cards/web@v2/dataset_card.md").decode()
    assert "## Revocations" in card and "licensor asked" in card and "| web@v1 |" in card
    assert f"| Documents | {len(new_docs):,} |" in card
    assert _json_lines(_cli("lineage", "doc", revoked))[0]["shard_set"] == built.shard_set_key
    _assert_no_reader_of_v2_sees(s, revoked, tmp_path)

    # Revoking a whole source: web@v2 is replaced by web@v3; web@v1 keeps its first replacement.
    cc_docs = set(
        catalog.read_batch(s, "tokenized_documents", built.cc_batch, columns=("doc_id",))
        .column("doc_id")
        .to_pylist()
    )
    out = _cli("revoke", "--source", "commoncrawl", "--reason", "licence withdrawn")
    assert "version web@v2 -> web@v3" in out and "version web@v1 -> none" in out
    assert _checks(instance, "dataset_version", "web@v3") == {"version_counts_match": True}
    v3_set = shard_set_partition("web@v3", new_key.split("/", 1)[1])
    assert all(_checks(instance, "shard_set", v3_set).values())
    v3_docs = set(
        version_documents(s, require_version(s, "web@v3"), "tokenized_documents", ("doc_id",))
        .column("doc_id")
        .to_pylist()
    )
    assert v3_docs == old_docs - {revoked} - cc_docs
    with pytest.raises(ValueError, match="revoked: licence withdrawn"):
        make_dataset("web@v2", rank=0, world_size=1, settings=s)

    # A version cut later leaves out everything revoked so far.
    v4, _ = create_version(s, "web@v4", None, run_id=None)
    v4_docs = set(
        version_documents(s, v4, "tokenized_documents", ("doc_id",)).column("doc_id").to_pylist()
    )
    assert v4_docs == v3_docs
    # Forward lineage also names versions without a shard set; the revoked doc is in none after v1.
    kept = sorted(v4_docs)[0]
    unsharded = [p for p in _json_lines(_cli("lineage", "doc", kept)) if p["shard_set"] is None]
    assert [p["version"] for p in unsharded] == ["web@v4"]
    assert {p["version"] for p in _json_lines(_cli("lineage", "doc", revoked))} == {"web@v1"}
    recorded = _json_lines(_cli("lineage", "revocations"))
    assert [(r["criterion"], r["reason"]) for r in recorded] == [
        ("doc", "licensor asked"),
        ("source", "licence withdrawn"),
    ]


def _assert_no_reader_of_v2_sees(s: Settings, revoked: str, tmp_path: Path) -> None:
    """Every path that reads web@v2's rows leaves the revoked document out, where web@v1's
    rows hold it: `fm export` of every table a version selects, the text export, the card, the
    contamination scan and forward lineage."""
    exported: dict[str, set[str]] = {}
    for version_key in ("web@v1", "web@v2"):
        for table in [*STAGE_NAMES, "pii_redactions", "quarantine"]:
            out = tmp_path / version_key / f"{table}.jsonl"
            _cli("export", table, "--version", version_key, "--out", str(out))
            rows = _json_lines(out.read_text())
            exported.setdefault(version_key, set()).update(
                f"{table}:{r['doc_id']}" for r in rows if r.get("doc_id")
            )
    document_tables = {f"{t}:{revoked}" for t in STAGE_NAMES}
    assert document_tables <= exported["web@v1"], "web@v1 must still hold the revoked document"
    leaked = sorted(key for key in exported["web@v2"] if key.endswith(f":{revoked}"))
    assert not leaked, f"fm export --version web@v2 returned the revoked document: {leaked}"

    v2 = require_version(s, "web@v2")
    text = version_text_documents(s, v2, ("doc_id", "text"))
    assert revoked not in set(text.column("doc_id").to_pylist())
    assert text.num_rows == v2.num_documents
    assert read_card_data(s, v2).documents == v2.num_documents
    assert "web@v2" not in versions_holding(s, [revoked])


def test_an_interrupted_revocation_is_finished_by_running_it_again(built: Built) -> None:
    """`fm revoke` killed after its `revocation` partition cut the replacements, before it built
    their shard sets or marked the old ones: run again, it builds them through Dagster, with
    their checks, and marks the old set naming its replacement."""
    from fm_assets.defs.materialize import add_partitions, materialize
    from fm_assets.defs.partitions import revocations
    from fm_assets.shards.build import shard_set_key
    from fm_assets.shards.revoke import revocation_plan
    from fm_assets.storage.revocations import record_revocation
    from fm_assets.versions.dataset_version import next_version_key

    s = built.settings
    version, _ = create_version(s, next_version_key(s, "web"), None, run_id=None)
    build = build_shard_set(
        s, version.version_key, built.tokenizer, SEQ_LEN, shard_size_bytes=SHARD_BYTES
    )
    config = build.manifest.shard_set_key.split("/", 1)[1]
    doc = sorted(
        version_documents(s, version, "tokenized_documents", ("doc_id",))
        .column("doc_id")
        .to_pylist()
    )[0]

    # The first attempt: recorded, its partition materialized, then killed.
    record = record_revocation(s, "doc", doc, "asked again")
    add_partitions(s, revocations, [record.revocation_id])
    materialize(s, ["revocation"], record.revocation_id, print)
    replaced = {v.version_key: v.replacement for v in revocation_plan(s, record).versions}
    replacement = replaced[version.version_key]
    assert replacement is not None
    new_key = shard_set_key(replacement, config)
    assert read_shard_set_row(s, new_key) is None
    assert len(make_dataset(version.version_key, rank=0, world_size=1, settings=s)) > 0

    out = _cli("revoke", "--doc", doc, "--reason", "asked again")
    assert f"version {version.version_key} -> none" in out  # replaced by the first attempt
    line = next(
        x for x in out.splitlines() if x.startswith(f"shard_set {build.manifest.shard_set_key} ")
    )
    assert f"-> {new_key}" in line
    with pytest.raises(ValueError, match=rf"revoked: asked again.*{replacement}"):
        make_dataset(version.version_key, rank=0, world_size=1, settings=s)
    instance = operations.dagster_instance(s)
    assert _checks(instance, "dataset_version", replacement) == {"version_counts_match": True}
    assert all(_checks(instance, "shard_set", shard_set_partition(replacement, config)).values())
    new_row = read_shard_set_row(s, new_key)
    assert new_row is not None
    new_dir = Path(str(new_row["uri"]).removeprefix("file://"))
    assert doc not in {d for ids in _shard_docs(new_dir) for d in ids}
    assert len(make_dataset(replacement, rank=0, world_size=1, settings=s)) > 0
