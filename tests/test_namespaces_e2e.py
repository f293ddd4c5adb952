"""Data namespaces: a version refuses a forbidden mix, and a trainer refuses a namespace it may not
read; each namespace's tables live in a catalog namespace of their own, below a warehouse prefix of
their own. On-device data is a JSONL file the test writes, cloud data another that repeats most of
its records; unverified web data is a shared WARC."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from fm_assets.commands import operations
from fm_assets.commands.cli import main
from fm_assets.curation.namespaces import NamespacePolicy, load_namespace_policy
from fm_assets.registries.tokenizers import register_tokenizer
from fm_assets.settings import Settings, load_settings
from fm_assets.shards.build import build_shard_set
from fm_assets.versions.dataset_version import create_version, version_namespaces
from fm_assets.versions.reader import version_documents
from fm_loader import make_dataset
from tests.conftest import NEOX_TOKENIZER, WARC_DIR
from tests.policies import opt_out_policy

TOPICS = ["tides", "herons", "glaciers", "lichens", "comets", "bridges"]
CLOUD_ONLY = ["orchards", "volcanoes"]


def _notes(path: Path, topics: list[str]) -> Path:
    path.write_text(
        "".join(
            json.dumps({"id": t, "text": f"Notes kept on the phone about {t}. " * 40}) + "\n"
            for t in topics
        )
    )
    return path


@dataclass
class Landed:
    settings: Settings
    device_batch: str
    web_batch: str


@pytest.fixture(scope="module")
def landed(ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Landed]:
    home = tmp_path_factory.mktemp("namespaces") / "fm"
    saved = {k: os.environ.get(k) for k in ("FM_HOME", "DAGSTER_HOME", "FM_POLICY_FILE")}
    os.environ["FM_HOME"] = str(home)
    os.environ["DAGSTER_HOME"] = str(home / "dagster")
    # The notes repeat one sentence; the subject is namespaces, not curation.
    os.environ["FM_POLICY_FILE"] = str(opt_out_policy(home.parent))
    settings = load_settings()
    register_tokenizer(settings, NEOX_TOKENIZER, make_default=True)
    notes = _notes(home.parent / "device-notes.jsonl", TOPICS)
    device, _ = operations.land(
        settings, [notes], source="phone", license="proprietary", namespace="on-device"
    )
    web, _ = operations.land(
        settings,
        [WARC_DIR / "wget-sample-0001.warc.gz"],
        source="crawl",
        license="NOASSERTION",
        namespace="web-unverified",
    )
    for batch in (device, web):
        operations.run_batch(settings, batch.batch_id, lambda message: None)
    yield Landed(settings, device.batch_id, web.batch_id)
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.mark.slow
def test_a_version_refuses_a_forbidden_mix(landed: Landed) -> None:
    result = CliRunner().invoke(
        main,
        ["version", "create", "mixed", "--batches", f"{landed.device_batch},{landed.web_batch}"],
    )
    assert result.exit_code == 1
    assert "namespaces 'on-device' and 'web-unverified'" in result.stderr


@pytest.mark.slow
def test_a_trainer_reads_only_its_namespaces(landed: Landed) -> None:
    s = landed.settings
    info = register_tokenizer(s, NEOX_TOKENIZER)
    device, _ = create_version(s, "device@v1", [landed.device_batch], run_id=None)
    assert version_namespaces(s, "device@v1") == ["on-device"]
    build_shard_set(s, device.version_key, info, 128)
    with pytest.raises(ValueError, match=r"holds data from namespaces \['on-device'\]"):
        make_dataset("device@v1", rank=0, world_size=1, settings=s, namespaces={"cloud"})
    allowed = make_dataset(
        "device@v1", rank=0, world_size=1, settings=s, namespaces={"cloud", "on-device"}
    )
    assert len(allowed) > 0
    # The version's text, tokenized in the loader, is refused the same way.
    from fm_assets.shards.text_export import export_text_set

    export_text_set(s, device.version_key)
    online = {"settings": s, "tokenizer": str(NEOX_TOKENIZER), "seq_len": 64}
    with pytest.raises(ValueError, match=r"holds data from namespaces \['on-device'\]"):
        make_dataset("device@v1", tokenize_online=True, namespaces={"cloud"}, **online)
    make_dataset("device@v1", tokenize_online=True, namespaces={"on-device"}, **online)


def test_the_namespace_policy_comes_from_the_policy_file(tmp_path: Path) -> None:
    NamespacePolicy().refuse_mix(["cloud", "on-device"], "web@v1")  # allowed by default
    with pytest.raises(ValueError, match="'on-device' and 'quarantine'"):
        NamespacePolicy().refuse_mix(["quarantine", "on-device"], "web@v1")
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text('[namespaces]\nnever_together = [["cloud", "on-device"]]\n')
    settings = load_settings({"FM_HOME": str(tmp_path), "FM_POLICY_FILE": str(policy_file)})
    with pytest.raises(ValueError, match="'cloud' and 'on-device'"):
        load_namespace_policy(settings).refuse_mix(["cloud", "on-device"], "web@v1")
    policy_file.write_text('[namespaces]\nnever_together = [["cloud"]]\n')
    with pytest.raises(ValueError, match="malformed pairs"):
        load_namespace_policy(settings)


@pytest.mark.slow
def test_each_namespaces_bytes_live_under_its_own_prefixes(landed: Landed) -> None:
    """What a bucket policy matches (`deploy/iam/namespaces.example.json`): the landed files,
    every data file of every document table and the shard sets of each namespace."""
    from fm_assets.execution import pipeline
    from fm_assets.storage import catalog
    from fm_assets.storage.objectstore import open_object_store

    s = landed.settings
    store = open_object_store(s)
    assert store.list_dir("landing/data") == ["on-device", "web-unverified"]
    for batch, namespace in (
        (landed.device_batch, "on-device"),
        (landed.web_batch, "web-unverified"),
    ):
        for stage in pipeline.STAGE_NAMES:
            table = catalog.load_table(s, stage, namespace=namespace)
            paths = [
                task.file.file_path
                for task in table.scan(
                    row_filter=catalog.where_equal("batch_id", batch)
                ).plan_files()
            ]
            assert paths, f"{stage} holds no data file of {batch}"
            assert all(f"/namespace={namespace}/" in p for p in paths), (stage, paths)
    info = register_tokenizer(s, NEOX_TOKENIZER)
    web, _ = create_version(s, "webonly@v1", [landed.web_batch], run_id=None)
    built = build_shard_set(s, web.version_key, info, 128)
    assert store.key_of(built.uri).startswith("shards/web-unverified/webonly/v1/")


@pytest.fixture(scope="module")
def cloud_batch(landed: Landed) -> str:
    """A batch landed into `cloud` after the others: the device notes again (same records, same
    doc ids) and two more. Landed for the tests after the ones above, which see two namespaces."""
    home = landed.settings.home
    synced = _notes(home.parent / "synced-notes.jsonl", TOPICS + CLOUD_ONLY)
    cloud, _ = operations.land(landed.settings, [synced], source="sync", license="proprietary")
    operations.run_batch(landed.settings, cloud.batch_id, lambda message: None)
    return cloud.batch_id


@pytest.mark.slow
def test_each_namespaces_tables_live_in_a_catalog_namespace_of_their_own(
    landed: Landed, cloud_batch: str
) -> None:
    """Listed through pyiceberg: the document tables of each data namespace in `fm_<namespace>`,
    the platform-wide ones in `fm` only; each table's files below its namespace's location."""
    from fm_assets.execution import pipeline
    from fm_assets.storage import catalog

    s = landed.settings
    iceberg = catalog.open_catalog(s)
    assert {"fm", "fm_cloud", "fm_on_device", "fm_web_unverified"} <= {
        n[0] for n in iceberg.list_namespaces()
    }
    assert catalog.data_namespaces(s) == ["cloud", "on-device", "web-unverified"]
    per_namespace = {
        *pipeline.STAGE_NAMES,
        "quarantine",
        "document_index",
        "neardup_index",
        "pii_redactions",
        "contamination_matches",
    }
    platform = {name for (_, name) in iceberg.list_tables("fm")}
    assert not per_namespace & platform, "document tables in the platform's namespace"
    assert {"dataset_versions", "tokenizers"} <= platform
    for namespace, batch in (("on-device", landed.device_batch), ("cloud", cloud_batch)):
        held = catalog.catalog_namespace(s, namespace)
        assert per_namespace <= {name for (_, name) in iceberg.list_tables(held)}
        location = catalog.namespace_location(s, namespace)
        assert location.endswith(f"/warehouse/{held}")
        for name in per_namespace:
            table = catalog.load_table(s, name, namespace=namespace)
            assert table.location().startswith(f"{location}/"), (name, table.location())
            files = [t.file.file_path for t in table.scan().plan_files()]
            assert all(f.startswith(f"{location}/{name}/data/") for f in files), (name, files)
        # No row of another namespace's batch: nothing of `batch` outside its namespace.
        for other in catalog.data_namespaces(s):
            rows = catalog.read_table(
                s,
                "raw_documents",
                catalog.where_equal("batch_id", batch),
                columns=("doc_id",),
                namespace=other,
            )
            assert (rows.num_rows > 0) is (other == namespace), (batch, other)


@pytest.mark.slow
def test_dedup_is_per_namespace_and_a_version_keeps_a_shared_document_once(
    landed: Landed, cloud_batch: str
) -> None:
    from fm_assets.commands.explain import explain_document
    from fm_assets.storage import catalog
    from fm_assets.versions.membership import exclusions

    s = landed.settings
    # The cloud batch holds the device notes too, and keeps them: its namespace never saw them.
    cloud_raw = catalog.read_batch(s, "raw_documents", cloud_batch, columns=("doc_id",))
    device_raw = catalog.read_batch(s, "raw_documents", landed.device_batch, columns=("doc_id",))
    shared = set(cloud_raw.column("doc_id").to_pylist()) & set(
        device_raw.column("doc_id").to_pylist()
    )
    assert len(shared) == len(TOPICS)
    rules = catalog.read_batch(s, "quarantine", cloud_batch).column("rule").to_pylist()
    assert "exact_duplicate" not in rules and "near_duplicate" not in rules
    kept = catalog.read_batch(s, "tokenized_documents", cloud_batch, columns=("doc_id",))
    assert kept.num_rows == len(TOPICS + CLOUD_ONLY)

    # A version over both keeps each document once: the copy of the batch landed first.
    both, _ = create_version(s, "both@v1", [landed.device_batch, cloud_batch], None)
    assert both.namespaces == ("cloud", "on-device")
    assert version_namespaces(s, "both@v1") == ["cloud", "on-device"]
    docs = version_documents(s, both, "tokenized_documents", ("doc_id", "namespace"))
    assert docs.num_rows == both.num_documents == len(TOPICS + CLOUD_ONLY)
    owner = dict(zip(*(docs.column(c).to_pylist() for c in ("doc_id", "namespace")), strict=True))
    assert {owner[d] for d in shared} == {"on-device"}
    left_out = exclusions(s, "both@v1", "cloud").to_pylist()
    assert {r["doc_id"] for r in left_out} == shared
    assert {(r["kept_in"], r["revocation_id"]) for r in left_out} == {("on-device", None)}
    # Tagged in both namespaces; its shard set and its checks work end to end.
    for namespace in both.namespaces:
        table = catalog.load_table(s, "tokenized_documents", namespace=namespace)
        assert (
            table.metadata.refs["both@v1"].snapshot_id
            == (both.snapshot_ids[namespace]["tokenized_documents"])
        )
    key = operations.build_shards(s, "both@v1", str(NEOX_TOKENIZER), 128, lambda m: None)
    from fm_assets.shards.build import read_shard_set_row

    row = read_shard_set_row(s, key)
    assert row is not None and "/shards/cloud.on-device/both/v1/" in str(row["uri"])
    dataset = make_dataset(
        "both@v1", rank=0, world_size=1, settings=s, namespaces={"cloud", "on-device"}
    )
    assert sum(1 for _ in dataset) == int(row["num_samples"])  # every checksum verified
    with pytest.raises(ValueError, match=r"both@v1 holds data from namespaces \['on-device'\]"):
        make_dataset("both@v1", rank=0, world_size=1, settings=s, namespaces={"cloud"})
    # Lineage lives with each document, in its namespace's sample_documents.
    for namespace in both.namespaces:
        lineage = catalog.read_table(
            s, "sample_documents", catalog.where_equal("shard_set_key", key), namespace=namespace
        )
        assert {owner[d] for d in lineage.column("doc_id").to_pylist()} == {namespace}
    doc = sorted(shared)[0]
    runner = CliRunner()
    sample = runner.invoke(main, ["lineage", "doc", doc])
    assert sample.exit_code == 0, sample.output
    assert key in {json.loads(line)["shard_set"] for line in sample.stdout.splitlines()}
    verified = runner.invoke(main, ["verify", "both@v1"])
    assert verified.exit_code == 0, verified.output
    # `fm explain` finds the document in both namespaces' batches.
    explained = "\n".join(explain_document(s, doc))
    assert f"batch {landed.device_batch} (namespace on-device)" in explained
    assert f"batch {cloud_batch} (namespace cloud)" in explained
