"""The production object store: the whole platform on a real S3 server (SeaweedFS on loopback).

`FM_OBJECT_STORE=s3://...` and `FM_WAREHOUSE=s3://...` with `FM_S3_ENDPOINT` and the standard AWS
credential variables: landing, the published log the sensor follows, stages reading landed files
and the tokenizer on Ray workers, Iceberg tables, shard sets uploaded manifest-last, their checks,
and `fm_loader.make_dataset` serving the set from its local cache, keyed by the manifest hash.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from fm_assets.commands import operations
from fm_assets.registries.tokenizers import register_tokenizer
from fm_assets.settings import Settings, load_settings
from fm_assets.storage import bookkeeping, catalog
from fm_assets.storage.landing import BatchManifest
from fm_loader.storage.cache_usage import USAGE_NAME
from tests.conftest import NEOX_TOKENIZER, WARC_DIR, ray_workers_with
from tests.services.s3 import S3Server, seaweedfs_s3

pytestmark = pytest.mark.slow

WARC = WARC_DIR / "wget-sample-0000.warc.gz"
SEQ_LEN = 1024
OBJECTS = "platform"  # prefix of FM_OBJECT_STORE inside the bucket
WAREHOUSE = "warehouse"  # prefix of FM_WAREHOUSE inside the bucket


@dataclass
class S3Platform:
    s3: S3Server
    settings: Settings
    batch: BatchManifest
    version_key: str
    shard_set_key: str
    row: dict[str, Any]  # the shard set's catalog row
    cache_dir: Path

    def keys(self, prefix: str) -> dict[str, int]:
        """Object key (below the bucket) -> size, for every object under `prefix`."""
        selector = pafs.FileSelector(f"{self.s3.bucket}/{prefix}", recursive=True)
        return {
            info.path.removeprefix(f"{self.s3.bucket}/"): info.size
            for info in self.s3.filesystem().get_file_info(selector)
            if info.type == pafs.FileType.File
        }


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with seaweedfs_s3(tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server


@pytest.fixture(scope="module")
def platform(
    request: pytest.FixtureRequest, s3: S3Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[S3Platform]:
    from fm_assets.shards.build import read_shard_set_row

    home = tmp_path_factory.mktemp("s3-platform") / "fm"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("FM_HOME", str(home))
        env.setenv("DAGSTER_HOME", str(home / "dagster"))
        env.setenv("FM_OBJECT_STORE", f"s3://{s3.bucket}/{OBJECTS}")
        env.setenv("FM_WAREHOUSE", f"s3://{s3.bucket}/{WAREHOUSE}")
        env.setenv("FM_S3_ENDPOINT", s3.endpoint)
        for name, value in s3.env().items():
            env.setenv(name, value)
        # The session's Ray, requested only now: if this module starts it, its workers
        # inherit the credentials above and need no restart.
        request.getfixturevalue("ray_session")
        ray_workers_with(s3.env())
        settings = load_settings()
        log: list[str] = []
        register_tokenizer(settings, NEOX_TOKENIZER, make_default=True)
        batch, created = operations.land(settings, [WARC], source="wget", license="Apache-2.0")
        assert created
        operations.run_batch(settings, batch.batch_id, log.append)  # raises if a check fails
        version_key = operations.create_version(settings, "web", [], log.append)
        shard_set_key = operations.build_shards(
            settings, version_key, str(NEOX_TOKENIZER), SEQ_LEN, log.append
        )
        row = read_shard_set_row(settings, shard_set_key)
        assert row is not None
        yield S3Platform(
            s3=s3,
            settings=settings,
            batch=batch,
            version_key=version_key,
            shard_set_key=shard_set_key,
            row=row,
            cache_dir=home.parent / "loader-cache",
        )


def test_landed_files_and_log_are_in_the_bucket(platform: S3Platform) -> None:
    from fm_assets.storage.landing import published_log, read_manifest
    from fm_assets.storage.objectstore import open_object_store

    objects = platform.keys(f"{OBJECTS}/landing")
    prefix = f"{OBJECTS}/landing/batches/{platform.batch.batch_id}"
    (landed,) = platform.batch.files
    assert objects[f"{OBJECTS}/{landed.key}"] == WARC.stat().st_size
    assert landed.key.startswith(f"landing/data/cloud/{platform.batch.batch_id}/")
    assert f"{prefix}/manifest.json" in objects
    with platform.s3.filesystem().open_input_stream(
        f"{platform.s3.bucket}/{OBJECTS}/{landed.key}", compression=None
    ) as f:
        assert hashlib.sha256(f.read()).hexdigest() == landed.sha256
    store = open_object_store(platform.settings)
    assert [b for _, b in published_log(store)] == [platform.batch.batch_id]
    assert read_manifest(store, platform.batch.batch_id) == platform.batch
    # Landing the same file again finds the batch in S3 and does no new work.
    again, created = operations.land(platform.settings, [WARC], source="wget", license="Apache-2.0")
    assert not created and again == platform.batch


def test_ray_workers_read_the_landed_files_from_s3(platform: S3Platform) -> None:
    """The raw stage turns a failed read into a `read_error` quarantine row: there must be none,
    and the server must refuse other credentials (so the workers used the real ones)."""
    s, batch_id = platform.settings, platform.batch.batch_id
    quarantine = catalog.read_batch(s, "quarantine", batch_id).to_pylist()
    assert [r["reason"] for r in quarantine if r["rule"] == "read_error"] == []
    raw = catalog.read_batch(s, "raw_documents", batch_id, columns=("source_file",))
    assert raw.num_rows >= 10 and set(raw.column("source_file").to_pylist()) == {WARC.name}
    tokenized = catalog.read_batch(s, "tokenized_documents", batch_id, columns=("doc_id",))
    assert tokenized.num_rows >= 10
    stranger = pafs.S3FileSystem(
        access_key="someone-else",
        secret_key="wrong",
        endpoint_override=platform.s3.endpoint.removeprefix("http://"),
        scheme="http",
    )
    (landed,) = platform.batch.files
    with pytest.raises(OSError, match="ACCESS_DENIED"):
        stranger.open_input_stream(f"{platform.s3.bucket}/{OBJECTS}/{landed.key}").read()


def test_sensor_follows_the_published_log_on_s3(platform: S3Platform) -> None:
    import dagster as dg

    from fm_assets.definitions import defs

    sensor = defs.resolve_sensor_def("new_landing_batch_sensor")
    context = dg.build_sensor_context(
        instance=operations.dagster_instance(platform.settings),
        resources={"fm": defs.resources["fm"]},
    )
    result = sensor(context)
    # The batch is in the published log on S3; `fm run` processed it, so no second run.
    assert result.dynamic_partitions_requests[0].partition_keys == [platform.batch.batch_id]
    assert not result.run_requests


def test_nothing_is_written_to_local_object_or_warehouse_dirs(platform: S3Platform) -> None:
    home = platform.settings.home
    assert not (home / "objects").exists()
    assert not (home / "warehouse").exists()
    tables = platform.keys(WAREHOUSE)
    for namespace, table in (
        ("fm_cloud", "raw_documents"),
        ("fm_cloud", "tokenized_documents"),
        ("fm", "shard_sets"),
        ("fm", "dataset_versions"),
    ):
        files = [k for k in tables if k.startswith(f"{WAREHOUSE}/{namespace}/{table}/")]
        assert any(k.endswith(".metadata.json") for k in files), table
        assert any(k.endswith(".parquet") for k in files), table


def test_every_check_passed(platform: S3Platform) -> None:
    rows = bookkeeping.check_results(platform.settings)
    for row in rows:
        assert row["passed"], f"{row['asset']}.{row['check_name']}: {row['description']}"
    by_asset: dict[str, set[str]] = {}
    for row in rows:
        by_asset.setdefault(row["asset"], set()).add(row["check_name"])
    assert by_asset["landing_batch"] == {"files_match_manifest"}
    assert "token_counts_consistent" in by_asset["tokenized_documents"]
    assert by_asset["shard_set"] == {
        "shard_checksums_valid",
        "token_counts_match_version",
        "samples_carry_provenance",
        "no_contaminated_samples",
    }


def test_shard_set_is_published_in_the_bucket(platform: S3Platform) -> None:
    from fm_loader.format.manifest import ShardSetManifest

    dataset, number = platform.version_key.split("@v")
    config = platform.shard_set_key.split("/")[-1]
    # Below the namespaces its documents come from: a bucket policy grants trainers those.
    prefix = f"{OBJECTS}/shards/cloud/{dataset}/v{number}/{config}"
    assert platform.row["uri"] == f"s3://{platform.s3.bucket}/{prefix}"
    objects = platform.keys(prefix)
    with platform.s3.filesystem().open_input_stream(
        f"{platform.s3.bucket}/{prefix}/fm_manifest.json", compression=None
    ) as f:
        data = f.read()
    assert hashlib.sha256(data).hexdigest() == platform.row["manifest_sha256"]
    manifest = ShardSetManifest.from_json(data.decode())
    expected = {f"{prefix}/{s.name}": s.bytes for s in manifest.shards}
    assert {k: v for k, v in objects.items() if k.endswith(".mds")} == expected
    card = {
        f"{prefix}/card/{name}"
        for name in (
            "dataset_card.md",
            "waterfall.svg",
            "tokens_per_document.svg",
            "characters_per_document.svg",
        )
    }
    assert set(objects) == {
        *expected,
        f"{prefix}/index.json",
        f"{prefix}/fm_manifest.json",
        f"{prefix}/fm_namespaces.json",  # the data namespaces the set's documents came from
        *card,  # the version's dataset card, next to the shard set
    }
    assert manifest.num_samples == platform.row["num_samples"] > 0


def test_loader_serves_every_sample_from_the_cache(platform: S3Platform) -> None:
    import fm_loader
    from fm_assets.versions.dataset_version import require_version
    from fm_assets.versions.reader import version_documents

    dataset = fm_loader.make_dataset(
        platform.version_key,
        rank=0,
        world_size=1,
        settings=platform.settings,
        cache_dir=platform.cache_dir,
    )
    digest = platform.row["manifest_sha256"]
    entry = platform.cache_dir / digest
    # One entry named by the manifest's hash: no download left half-way, no lock file (and the
    # cache's usage record, which cost attribution reads).
    assert sorted(p.name for p in platform.cache_dir.iterdir()) == sorted([digest, USAGE_NAME])
    assert hashlib.sha256((entry / "fm_manifest.json").read_bytes()).hexdigest() == digest
    assert dataset.content_hashes == (digest,)
    samples = list(dataset)
    manifest = dataset.manifest
    assert len(samples) == manifest.num_samples
    # Real tokens of a sample = positions with a label + one last token per segment.
    tokens = sum(int(s["loss_mask"].sum()) + len(s["doc_ids"]) for s in samples)
    assert tokens == manifest.num_tokens
    version = require_version(platform.settings, platform.version_key)
    docs = version_documents(platform.settings, version, "tokenized_documents", ("doc_id",))
    assert {d for s in samples for d in s["doc_ids"]} == set(docs.column("doc_id").to_pylist())
    # A second trainer process on this node reuses the entry: nothing is downloaded again.
    stamps = {p.name: p.stat().st_mtime_ns for p in entry.iterdir()}
    again = fm_loader.make_dataset(
        platform.version_key, settings=platform.settings, cache_dir=platform.cache_dir
    )
    assert len(list(again)) == manifest.num_samples
    assert {p.name: p.stat().st_mtime_ns for p in entry.iterdir()} == stamps


def test_a_damaged_cached_shard_is_fetched_again_once(platform: S3Platform, tmp_path: Path) -> None:
    import fm_loader
    from fm_assets.storage.objectstore import filesystem_for

    cache = tmp_path / "cache"
    first = fm_loader.make_dataset(
        platform.version_key, settings=platform.settings, cache_dir=cache
    )
    info = first.manifest.shards[0]
    shard = cache / platform.row["manifest_sha256"] / info.name
    good = shard.read_bytes()
    flipped = bytearray(good)
    flipped[len(flipped) // 2] ^= 0xFF

    def fresh() -> fm_loader.FmDataset:
        return fm_loader.make_dataset(
            platform.version_key, settings=platform.settings, cache_dir=cache
        )

    # A flipped bit is caught by the checksum on first use, and the shard fetched again.
    shard.write_bytes(bytes(flipped))
    assert len(list(fresh())) == first.manifest.num_samples
    assert shard.read_bytes() == good
    # A truncated copy is caught when the entry is opened, and fetched again.
    shard.write_bytes(good[:-10])
    assert len(list(fresh())) == first.manifest.num_samples
    assert shard.read_bytes() == good
    # Bad in the bucket too: one more fetch, then an error naming the shard.
    fs, remote = filesystem_for(platform.row["uri"], platform.settings.s3_endpoint)
    key = f"{remote.rstrip('/')}/{info.name}"
    with fs.open_output_stream(key, compression=None) as out:
        out.write(bytes(flipped))
    try:
        shard.write_bytes(bytes(flipped))
        with pytest.raises(ValueError, match=rf"shard {info.name} of s3://.* corrupt in the"):
            list(fresh())
    finally:
        with fs.open_output_stream(key, compression=None) as out:
            out.write(good)
        shard.write_bytes(good)


def test_upload_publishes_the_manifest_last_and_bad_sets_are_refused(
    platform: S3Platform, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy of the set, uploaded again: the manifest goes last, and a set with a missing
    manifest or a damaged shard is never cached and fails its checks."""
    import fm_loader
    from fm_assets.checks.shard_sets import published_copy, shard_checksums_valid
    from fm_assets.shards.build import upload_shard_set
    from fm_assets.storage.objectstore import ObjectStore, open_object_store
    from fm_loader.storage.cache import cached_shard_set

    settings = platform.settings
    source = fm_loader.make_dataset(
        platform.version_key, settings=settings, cache_dir=platform.cache_dir
    )
    # The set's own files, as the cache holds them (without the cache's note of their origin).
    entry = platform.cache_dir / platform.row["manifest_sha256"]
    local = tmp_path / "set"
    local.mkdir()
    for path in entry.iterdir():
        if path.name != "fm_cache_entry.json":
            (local / path.name).write_bytes(path.read_bytes())
    store = open_object_store(settings)
    uploads: list[str] = []
    upload = ObjectStore.upload_file

    def recording(self: ObjectStore, path: Path, key: str) -> None:
        uploads.append(key.rsplit("/", 1)[-1])
        upload(self, path, key)

    monkeypatch.setattr(ObjectStore, "upload_file", recording)
    upload_shard_set(store, local, "copies/web-v1")
    assert uploads[-1] == "fm_manifest.json" and len(uploads) == len(source.manifest.shards) + 2

    digest = platform.row["manifest_sha256"]
    cache = tmp_path / "cache"
    # The copy is the same set: same manifest bytes, so it is served under the same key.
    assert cached_shard_set(
        store.uri("copies/web-v1"), digest, cache_dir=cache, s3_endpoint=settings.s3_endpoint
    ) == (cache / digest)

    victim = source.manifest.shards[0].name
    store.delete_file("copies/web-v1/fm_manifest.json")
    with pytest.raises(ValueError, match=r"not a complete shard set: fm_manifest\.json is missing"):
        cached_shard_set(
            store.uri("copies/web-v1"),
            digest,
            cache_dir=tmp_path / "c2",
            s3_endpoint=settings.s3_endpoint,
        )
    data = bytearray((local / victim).read_bytes())
    data[100] ^= 0xFF
    store.write_bytes_atomic(f"copies/web-v1/{victim}", bytes(data))
    store.upload_file(local / "fm_manifest.json", "copies/web-v1/fm_manifest.json")
    broken = tmp_path / "broken-cache"
    with pytest.raises(ValueError, match=rf"corrupt in the object store: {victim}"):
        cached_shard_set(
            store.uri("copies/web-v1"), digest, cache_dir=broken, s3_endpoint=settings.s3_endpoint
        )
    # Nothing of the failed download stays in the cache (no partial file, no lock file).
    assert list(broken.iterdir()) == []
    with published_copy(store.uri("copies/web-v1"), source.manifest, settings.s3_endpoint) as copy:
        outcome = shard_checksums_valid(copy, source.manifest)
    assert not outcome.passed and victim in outcome.description


def test_fm_cache_prewarm_then_an_epoch_without_the_stores_shards(
    platform: S3Platform, tmp_path: Path
) -> None:
    """`fm cache prewarm VERSION` materializes the shard set's `shard_set_cache` partition; the
    trainer then reads a whole epoch with every shard file gone from the bucket."""
    import dagster as dg
    from click.testing import CliRunner

    import fm_loader
    from fm_assets.commands.cli import main
    from fm_assets.defs.materialize import dagster_instance

    cache = tmp_path / "node-cache"
    result = CliRunner().invoke(
        main, ["cache", "prewarm", platform.version_key, "--cache-dir", str(cache)]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == platform.shard_set_key
    event = dagster_instance(platform.settings).get_latest_materialization_event(
        dg.AssetKey("shard_set_cache")
    )
    assert event is not None and event.asset_materialization is not None
    metadata = {k: v.value for k, v in event.asset_materialization.metadata.items()}
    assert metadata["shard_set_key"] == platform.shard_set_key
    assert metadata["hit_rate"] == 0.0 and metadata["warmup_s"] > 0
    assert metadata["bytes_fetched"] == metadata["bytes_total"] > 0

    prefix = platform.row["uri"].removeprefix(f"s3://{platform.s3.bucket}/")
    fs, bucket = platform.s3.filesystem(), platform.s3.bucket
    entry = cache / platform.row["manifest_sha256"]
    shards = [k for k in platform.keys(prefix) if k.rsplit("/", 1)[-1].startswith("shard.")]
    assert shards
    for key in shards:
        fs.delete_file(f"{bucket}/{key}")
    try:
        dataset = fm_loader.make_dataset(
            platform.version_key, settings=platform.settings, cache_dir=cache
        )
        loader = fm_loader.make_loader(dataset, batch_size=4, num_workers=2)
        served = sum(len(batch["sample_index"]) for batch in loader)
        assert served == platform.row["num_samples"]
        assert loader.metrics.snapshot()["cache_hit_rate"] == 1.0
        dataset.close()
    finally:  # later tests read the published set
        for key in shards:
            with fs.open_output_stream(f"{bucket}/{key}", compression=None) as out:
                out.write((entry / key.rsplit("/", 1)[-1]).read_bytes())


def test_fm_text_export_then_the_loader_tokenizes_every_document_once(
    platform: S3Platform, tmp_path: Path
) -> None:
    """The version's curated text, exported to the bucket and read through the node cache with
    the tokenizer given at load time, gives exactly the tokens the platform's tokenize stage
    stored for each document of the version."""
    from collections import Counter

    from click.testing import CliRunner

    import fm_loader
    from fm_assets.commands.cli import main
    from fm_assets.versions.dataset_version import require_version
    from fm_assets.versions.reader import version_documents

    result = CliRunner().invoke(main, ["text", "export", platform.version_key])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == platform.version_key
    prefix = f"{OBJECTS}/texts/cloud/web/v1"
    assert f"{prefix}/fm_text_manifest.json" in platform.keys(prefix)
    dataset = fm_loader.make_dataset(
        platform.version_key,
        settings=platform.settings,
        cache_dir=tmp_path / "cache",
        tokenizer=str(NEOX_TOKENIZER),
        seq_len=256,
        tokenize_online=True,
    )
    served: dict[str, Counter[int]] = {}
    for sample in dataset:
        cu, ids = sample["cu_seqlens"].tolist(), sample["input_ids"].tolist()
        for doc, start, end in zip(sample["doc_ids"], cu[:-1], cu[1:], strict=False):
            served.setdefault(doc, Counter()).update(ids[start:end])
    version = require_version(platform.settings, platform.version_key)
    stored = version_documents(
        platform.settings, version, "tokenized_documents", ("doc_id", "tokens")
    ).to_pylist()
    assert served == {row["doc_id"]: Counter(row["tokens"]) for row in stored}
