"""The whole graph on the shared Common Crawl and wget WARCs with the real GPT-NeoX tokenizer.

These are the data checks CI runs: any failed asset check fails the materialization here.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner

from fm_assets.commands import operations
from fm_assets.execution import pipeline
from fm_assets.registries.tokenizers import register_tokenizer
from fm_assets.settings import Settings, load_settings
from fm_assets.storage import bookkeeping, catalog
from fm_assets.storage.landing import BatchManifest
from tests.paths import LLAMA_TOKENIZER, NEOX_TOKENIZER, WARC_DIR
from tests.policies import opt_out_policy

pytestmark = pytest.mark.slow

NEOX_HASH = hashlib.sha256(NEOX_TOKENIZER.read_bytes()).hexdigest()


@dataclass
class Spine:
    settings: Settings
    batch: BatchManifest
    version_key: str
    shard_set_key: str
    log: list[str]


class _Collect(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__()
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


@pytest.fixture(scope="module")
def spine(ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Spine]:
    home = tmp_path_factory.mktemp("spine") / "fm"
    saved = {k: os.environ.get(k) for k in ("FM_HOME", "DAGSTER_HOME", "FM_POLICY_FILE")}
    os.environ["FM_HOME"] = str(home)
    os.environ["DAGSTER_HOME"] = str(home / "dagster")
    # Every page through every stage: the default web policy's own test is
    # tests/test_default_policy_e2e.py.
    os.environ["FM_POLICY_FILE"] = str(opt_out_policy(home.parent))
    settings = load_settings()
    log: list[str] = []
    # Stage progress goes to the `fm.progress` logger, which `fm run` prints on the terminal.
    progress = logging.getLogger("fm.progress")
    handler = _Collect(log)
    progress.addHandler(handler)
    progress.setLevel(logging.INFO)
    register_tokenizer(settings, NEOX_TOKENIZER, make_default=True)
    warcs = sorted(WARC_DIR.glob("*.warc.gz"))
    batch, created = operations.land(settings, warcs, source="commoncrawl", license="Apache-2.0")
    assert created
    operations.run_batch(settings, batch.batch_id, log.append)  # raises if any check fails
    version_key = operations.create_version(settings, "web", [], log.append)
    shard_set_key = operations.build_shards(
        settings, version_key, str(NEOX_TOKENIZER), 2048, log.append
    )
    progress.removeHandler(handler)
    yield Spine(settings, batch, version_key, shard_set_key, log)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def test_every_check_ran_and_passed(spine: Spine) -> None:
    results = bookkeeping.check_results(spine.settings)
    by_asset: dict[str, set[str]] = {}
    for row in results:
        assert row["passed"], f"{row['asset']}.{row['check_name']}: {row['description']}"
        by_asset.setdefault(row["asset"], set()).add(row["check_name"])
    for stage in pipeline.STAGE_NAMES:
        assert {"records_accounted_for", "document_expectations"} <= by_asset[stage]
    assert "token_counts_consistent" in by_asset["tokenized_documents"]
    assert by_asset["landing_batch"] == {"files_match_manifest"}
    assert by_asset["dataset_version"] == {"version_counts_match"}
    assert by_asset["shard_set"] == {
        "shard_checksums_valid",
        "token_counts_match_version",
        "samples_carry_provenance",
        "no_contaminated_samples",
    }


def test_sample_provenance_check_fails_on_samples_of_other_documents(
    spine: Spine, tmp_path: Path
) -> None:
    """The shard-set check reads every sample (as the loader does) and names samples whose
    documents the version does not hold; the version's own set passes it."""
    from fm_assets.checks.shard_sets import samples_carry_provenance
    from fm_assets.versions.dataset_version import require_version
    from fm_loader.format.manifest import local_directory, read_manifest
    from tests.shard_sets import synthetic_docs
    from tests.test_shard_writer import write_docs

    version = require_version(spine.settings, spine.version_key)
    built = catalog.read_table(
        spine.settings, "shard_sets", catalog.where_equal("shard_set_key", spine.shard_set_key)
    ).to_pylist()[0]["uri"]
    directory = str(local_directory(built))
    own = samples_carry_provenance(directory, read_manifest(directory), spine.settings, version)
    assert own.passed, own.description
    assert own.metadata["documents"] == version.num_documents
    _, foreign = write_docs(synthetic_docs(12, seed=9), str(tmp_path / "foreign"))
    outcome = samples_carry_provenance(str(tmp_path / "foreign"), foreign, spine.settings, version)
    assert not outcome.passed
    assert "documents not in version" in outcome.description


def test_stage_progress_reaches_the_terminal_and_dagster_metadata(spine: Spine) -> None:
    from dagster import AssetKey, DagsterInstance

    # The terminal (the log `fm run` prints): tasks, records and bytes read, an ETA.
    lines = [line for line in spine.log if line.startswith("tokenized_documents: ")]
    assert any(re.search(r"\d+/\d+ done, \d+ records, [\d.]+ MB read, .*ETA", s) for s in lines)
    # Dagster: the stage's materialization of the batch carries the same figures (a stage this
    # short writes no progress observations: tests/test_progress.py).
    events = DagsterInstance.get().fetch_materializations(AssetKey("tokenized_documents"), limit=50)
    metadata = [
        r.asset_materialization.metadata
        for r in events.records
        if r.asset_materialization is not None
        and r.asset_materialization.partition == spine.batch.batch_id
    ]
    assert metadata, "no materialization of the tokenize stage for the batch"
    kept_upstream = catalog.read_batch(
        spine.settings, "decontaminated_documents", spine.batch.batch_id
    )
    assert metadata[0]["records_in"].value == kept_upstream.num_rows
    assert metadata[0]["bytes_in"].value > 0 and metadata[0]["slices"].value >= 1


def test_every_record_is_kept_or_quarantined(spine: Spine) -> None:
    s, batch_id = spine.settings, spine.batch.batch_id
    raw = catalog.read_batch(s, "raw_documents", batch_id, columns=("record_id",))
    quarantine = catalog.read_batch(s, "quarantine", batch_id)
    # 16 CC pages + 22 + 15 wget pages + 1 whirlwind page, one of them an exact duplicate.
    raw_quarantined = [r for r in quarantine.to_pylist() if r["stage"] == "raw_documents"]
    assert raw.num_rows + len(raw_quarantined) == 54
    previous = raw.num_rows
    for stage in pipeline.STAGE_NAMES[1:]:
        kept = catalog.read_batch(s, stage, batch_id, columns=("record_id",)).num_rows
        dropped = sum(1 for r in quarantine.to_pylist() if r["stage"] == stage)
        assert kept + dropped == previous, stage
        previous = kept
    # The `none` policy decides nothing; near-dedup finds one pair of pages.
    assert previous >= 50
    curation = {r["rule"] for r in quarantine.to_pylist() if r["stage"] != "raw_documents"}
    assert curation == {"near_duplicate"}


def test_exact_duplicates_point_at_the_kept_record(spine: Spine) -> None:
    s, batch_id = spine.settings, spine.batch.batch_id
    rows = catalog.read_batch(s, "quarantine", batch_id).to_pylist()
    duplicates = [r for r in rows if r["rule"] == "exact_duplicate"]
    assert duplicates, "the wget samples hold one page twice"
    kept_ids = set(catalog.read_batch(s, "raw_documents", batch_id).column("record_id").to_pylist())
    for row in duplicates:
        original = row["reason"].removeprefix("same raw bytes as ").split("/", 1)[1]
        assert original in kept_ids
        assert row["raw_sha256"] == row["doc_id"]


def test_provenance_survives_every_stage(spine: Spine) -> None:
    s, batch_id = spine.settings, spine.batch.batch_id
    raw = catalog.read_batch(s, "raw_documents", batch_id)
    for row in raw.to_pylist():
        assert hashlib.sha256(row["raw_content"]).hexdigest() == row["raw_sha256"] == row["doc_id"]
    raw_by_id = {r["doc_id"]: r for r in raw.to_pylist()}
    files = {f.name for f in spine.batch.files}
    for stage in pipeline.STAGE_NAMES[1:]:
        for row in catalog.read_batch(s, stage, batch_id).to_pylist():
            origin = raw_by_id[row["doc_id"]]
            assert (row["source"], row["license"], row["namespace"]) == (
                "commoncrawl",
                "Apache-2.0",
                "cloud",
            )
            assert row["record_id"] == origin["record_id"] and row["source_file"] in files
            assert row["url"] == origin["url"]


def test_snapshots_record_stage_lineage(spine: Spine) -> None:
    s = spine.settings
    previous_snapshot = None
    for stage in pipeline.STAGE_NAMES:
        table = catalog.load_table(s, stage, namespace="cloud")
        props = table.current_snapshot().summary.additional_properties
        assert props["fm.stage"] == stage
        assert props["fm.batch_id"] == spine.batch.batch_id
        assert props["fm.code_version"] and len(props["fm.config_hash"]) == 16
        assert len(props["fm.stage_key"]) == 64 and props["fm.run_id"]
        if previous_snapshot is not None:
            assert props["fm.input_snapshot_ids"] == str(previous_snapshot)
        previous_snapshot = table.current_snapshot().snapshot_id


def test_rerun_with_same_inputs_does_no_work(spine: Spine) -> None:
    from dagster import DagsterInstance

    s = spine.settings
    runs_before = len(bookkeeping.stage_runs(s))
    snapshots_before = {
        t: catalog.current_snapshot_id(s, t, namespace="cloud") for t in pipeline.STAGE_NAMES
    }
    dagster_runs_before = DagsterInstance.get().get_runs_count()
    log: list[str] = []
    # Right after the first run: every later stage's quarantine commit must not make an earlier
    # stage's checks look stale, or the rerun would start Dagster to re-evaluate them.
    operations.run_batch(s, spine.batch.batch_id, log.append)
    assert any("nothing to do" in line for line in log), log
    assert DagsterInstance.get().get_runs_count() == dagster_runs_before
    assert len(bookkeeping.stage_runs(s)) == runs_before
    assert {
        t: catalog.current_snapshot_id(s, t, namespace="cloud") for t in pipeline.STAGE_NAMES
    } == snapshots_before


def test_version_is_tagged_and_immutable(spine: Spine) -> None:
    from fm_assets.versions.dataset_version import create_version, read_version

    s = spine.settings
    version = read_version(s, spine.version_key)
    assert version is not None and version.batches == (spine.batch.batch_id,)
    assert version.tokenizer_hash == NEOX_HASH
    tokenized = catalog.read_batch(s, "tokenized_documents", spine.batch.batch_id)
    assert version.num_documents == tokenized.num_rows
    assert version.num_tokens == pc.sum(tokenized.column("num_tokens")).as_py()
    for table_name in pipeline.STAGE_NAMES:
        refs = catalog.load_table(s, table_name, namespace="cloud").metadata.refs
        assert refs[spine.version_key].snapshot_id == version.snapshot_ids["cloud"][table_name]
    with pytest.raises(ValueError, match="immutable"):
        create_version(s, spine.version_key, ["b-0000000000"], run_id=None)


def test_shard_set_manifest_and_packing(spine: Spine) -> None:
    from fm_assets.shards.build import read_shard_set_row
    from fm_loader.format.manifest import read_manifest, schema_fingerprint

    row = read_shard_set_row(spine.settings, spine.shard_set_key)
    assert row is not None
    manifest = read_manifest(row["uri"])
    assert manifest.source_version == spine.version_key
    assert manifest.tokenizer_hash == NEOX_HASH
    assert manifest.seq_len == 2048 and manifest.token_dtype == "uint16"  # vocab 50,280 < 2**16
    assert manifest.schema_fingerprint == schema_fingerprint(2048, "uint16")
    # Best-fit-decreasing reaches the optimum here: no sequence more than the tokens need
    # (efficiency ~0.98 on these pages; the exact figure depends on how many survive curation).
    assert manifest.num_samples == -(-manifest.num_tokens // 2048)
    assert manifest.packing_efficiency >= 0.97
    version_tokens = operations_version_tokens(spine)
    assert manifest.num_tokens == version_tokens
    assert manifest.num_samples * 2048 * manifest.packing_efficiency == pytest.approx(
        version_tokens
    )
    assert all(len(shard.sha256) == 64 and shard.samples > 0 for shard in manifest.shards)


def operations_version_tokens(spine: Spine) -> int:
    from fm_assets.versions.dataset_version import require_version

    return require_version(spine.settings, spine.version_key).num_tokens


def test_loader_serves_the_documents_tokens(spine: Spine) -> None:
    import numpy as np

    import fm_loader

    s = spine.settings
    docs = catalog.read_batch(s, "tokenized_documents", spine.batch.batch_id)
    tokens_by_doc = {
        d: np.asarray(t)
        for d, t in zip(
            docs.column("doc_id").to_pylist(), docs.column("tokens").to_pylist(), strict=True
        )
    }
    ds = fm_loader.make_dataset(spine.version_key, rank=0, world_size=1, seed=3, settings=s)
    served = 0
    for sample in ds:
        bounds = sample["cu_seqlens"].tolist()
        for doc_id, start, end in zip(sample["doc_ids"], bounds, bounds[1:], strict=False):
            piece = sample["input_ids"][start:end].numpy()
            assert piece.size and _is_slice_of(piece, tokens_by_doc[doc_id])
            assert sample["position_ids"][start] == 0
        served += 1
    assert served == len(ds)


def _is_slice_of(piece: np.ndarray, whole: np.ndarray) -> bool:
    n = piece.size
    windows = np.lib.stride_tricks.sliding_window_view(whole, n)
    return bool((windows == piece).all(axis=1).any())


def test_loader_ranks_partition_the_samples(spine: Spine) -> None:
    import fm_loader

    s = spine.settings

    def fingerprints(rank: int, world: int) -> list[bytes]:
        ds = fm_loader.make_dataset(spine.version_key, rank=rank, world_size=world, settings=s)
        return [sample["input_ids"].numpy().tobytes() for sample in ds]

    everything = fingerprints(0, 1)
    split = fingerprints(0, 3) + fingerprints(1, 3) + fingerprints(2, 3)
    assert sorted(split) == sorted(everything)


def test_loader_refuses_a_mismatched_tokenizer_or_schema(spine: Spine) -> None:
    import fm_loader

    s = spine.settings
    with pytest.raises(ValueError, match="tokenizer"):
        fm_loader.make_dataset(
            spine.shard_set_key.split("/")[0],
            rank=0,
            world_size=1,
            settings=s,
            expected_tokenizer_hash="0" * 64,
        )
    with pytest.raises(ValueError, match="fingerprint"):
        fm_loader.make_dataset(
            spine.version_key,
            rank=0,
            world_size=1,
            settings=s,
            expected_schema_fingerprint="0" * 64,
        )


def test_second_tokenizer_gets_its_own_shard_set(spine: Spine) -> None:
    import fm_loader

    s = spine.settings
    key = operations.build_shards(
        s, spine.version_key, str(LLAMA_TOKENIZER), 1024, spine.log.append
    )
    assert key != spine.shard_set_key
    with pytest.raises(ValueError, match=r"seq_len|tokenizer"):
        fm_loader.make_dataset(spine.version_key, rank=0, world_size=1, settings=s)
    ds = fm_loader.make_dataset(
        spine.version_key, rank=0, world_size=1, settings=s, tokenizer=str(LLAMA_TOKENIZER)
    )
    assert ds.manifest.seq_len == 1024 and ds.manifest.vocab_size == 32003


def test_cli_export_and_status(spine: Spine, tmp_path: Path) -> None:
    from fm_assets.commands.cli import main

    runner = CliRunner()
    out = tmp_path / "docs.jsonl"
    result = runner.invoke(
        main, ["export", "tokenized_documents", "--version", spine.version_key, "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    stored = catalog.read_batch(spine.settings, "tokenized_documents", spine.batch.batch_id)
    assert sorted(r["doc_id"] for r in exported) == sorted(stored.column("doc_id").to_pylist())
    assert sum(r["num_tokens"] for r in exported) == operations_version_tokens(spine)
    result = runner.invoke(
        main, ["export", "quarantine", "--batch", spine.batch.batch_id, "--out", str(out)]
    )
    assert result.exit_code == 0 and '"rule": "exact_duplicate"' in out.read_text()
    status = runner.invoke(main, ["status"])
    assert status.exit_code == 0
    for expected in (
        spine.batch.batch_id,
        spine.version_key,
        spine.shard_set_key,
        "failing checks: 0",
    ):
        assert expected in status.output


def test_cli_version_and_shards_print_their_keys_last(spine: Spine) -> None:
    from fm_assets.commands.cli import main
    from fm_assets.shards.build import read_shard_set_row

    runner = CliRunner()
    created = runner.invoke(main, ["version", "create", "web"])
    assert created.exit_code == 0, created.output
    assert created.stdout.strip().splitlines()[-1] == "web@v2"
    before = read_shard_set_row(spine.settings, spine.shard_set_key)
    rebuilt = runner.invoke(
        main,
        ["shards", "build", spine.version_key, "--tokenizer", NEOX_HASH[:12], "--seq-len", "2048"],
    )
    assert rebuilt.exit_code == 0, rebuilt.output
    assert rebuilt.stdout.strip().splitlines()[-1] == spine.shard_set_key
    # Same version, tokenizer and seq_len: nothing rebuilt, the registered set is unchanged.
    assert read_shard_set_row(spine.settings, spine.shard_set_key) == before
    unknown = runner.invoke(
        main, ["shards", "build", "web@v9", "--tokenizer", "x", "--seq-len", "8"]
    )
    assert unknown.exit_code == 1 and "fm version create web" in unknown.output


def test_sensor_requests_each_new_batch_once(spine: Spine, tmp_path: Path) -> None:
    import dagster as dg

    from fm_assets.definitions import defs

    sensor = defs.resolve_sensor_def("new_landing_batch_sensor")
    instance = dg.DagsterInstance.get()
    context = dg.build_sensor_context(instance=instance, resources={"fm": defs.resources["fm"]})
    first = sensor(context)
    # `fm run` processed the spine's batch: the sensor adds its partition, requests no run.
    assert not first.run_requests
    assert first.dynamic_partitions_requests[0].partition_keys == [spine.batch.batch_id]

    new_file = tmp_path / "note.txt"
    new_file.write_text("A new document arrives in the landing zone.\n")
    batch, _ = operations.land(spine.settings, [new_file], source="notes", license="CC0-1.0")
    context = dg.build_sensor_context(
        instance=instance, cursor=first.cursor, resources={"fm": defs.resources["fm"]}
    )
    second = sensor(context)
    assert [r.partition_key for r in second.run_requests] == [batch.batch_id]
    assert second.run_requests[0].run_key == batch.batch_id
    context = dg.build_sensor_context(
        instance=instance, cursor=second.cursor, resources={"fm": defs.resources["fm"]}
    )
    assert not sensor(context).run_requests


def test_dataset_card_is_attached_to_the_version_and_written_next_to_the_shard_set(
    spine: Spine,
) -> None:
    import dagster as dg

    from fm_assets.shards.build import read_shard_set_row
    from fm_assets.storage.objectstore import open_object_store

    store = open_object_store(spine.settings)
    row = read_shard_set_row(spine.settings, spine.shard_set_key)
    assert row is not None
    card_dir = f"{store.key_of(str(row['uri']))}/card"
    markdown = store.read_bytes(f"{card_dir}/dataset_card.md").decode()
    assert spine.version_key in markdown and "near_duplicate" in markdown
    # The version's card, copied: the shard set's build does not draw it again.
    assert markdown == store.read_bytes(f"cards/{spine.version_key}/dataset_card.md").decode()
    for plot in ("waterfall.svg", "tokens_per_document.svg"):
        assert f"]({plot})" in markdown
        assert store.read_bytes(f"{card_dir}/{plot}").startswith(b"<?xml")
    instance = operations.dagster_instance(spine.settings)
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(
            asset_key=dg.AssetKey("dataset_version"), asset_partitions=[spine.version_key]
        ),
        limit=1,
    ).records
    assert records and records[0].asset_materialization is not None
    metadata = records[0].asset_materialization.metadata
    assert metadata["dataset_card"].value == markdown
    summary = metadata["card_summary"].value
    assert summary["documents"] == metadata["num_documents"].value
