"""Data namespaces: a version refuses a forbidden mix, and a trainer refuses a namespace it may not
read. On-device data is a JSONL file the test writes; unverified web data is a shared WARC."""

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
from fm_loader import make_dataset
from tests.conftest import NEOX_TOKENIZER, WARC_DIR
from tests.policies import opt_out_policy

TOPICS = ["tides", "herons", "glaciers", "lichens", "comets", "bridges"]


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
    notes = home.parent / "device-notes.jsonl"
    notes.write_text(
        "".join(
            json.dumps({"id": t, "text": f"Notes kept on the phone about {t}. " * 40}) + "\n"
            for t in TOPICS
        )
    )
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
