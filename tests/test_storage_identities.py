"""Least privilege enforced by the object store itself: SeaweedFS configured with the identities
and the bucket policy of deploy/iam/ (`seaweedfs-identities.example.json`,
`seaweedfs-bucket-policy.example.json`, used verbatim but for their placeholder keys).

- the control plane (Dagster, `fm`) reads, writes and deletes under its deployment's prefixes;
- Ray workers, which parse untrusted input, read those prefixes and create table data files
  (`<warehouse>/<catalog namespace>/<table>/data/...`) and nothing else: no delete anywhere, no
  Iceberg metadata (the commit), no landed file, shard set, text set or registry copy;
- a trainer holding cloud credentials reads cloud shard and text sets and is refused every
  on-device object; an on-device trainer reads both.

What SeaweedFS (like AWS IAM) cannot refuse: a worker replacing a committed data file with new
bytes under the same name (refusing it needs the writer to send `If-None-Match`, which pyiceberg's
data-file writer does not). That is caught instead: `fm verify` names the file, and with the
bucket versioned the committed bytes stay a version the worker cannot delete.

The last test runs a batch with the driver on the control-plane identity and the session's Ray
workers on the workers' (its nodes hold tests/services/s3.py's key, which this store gives that
identity), as a cluster's pods hold their own secret.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from fm_assets.settings import load_settings
from fm_assets.shards.build import shard_set_prefix
from fm_assets.shards.text_export import text_set_prefix
from fm_assets.storage.catalog import catalog_namespace
from fm_assets.storage.landing import data_prefix
from tests.paths import NEOX_TOKENIZER, REPO
from tests.policies import opt_out_policy
from tests.services import s3 as s3_service
from tests.services.fixtures import s3_credentials
from tests.services.s3 import S3Server, seaweedfs_s3

pytestmark = pytest.mark.slow

IAM = REPO / "deploy" / "iam"
BUCKET = "fm-data"  # the examples' bucket and prefixes, used as they are
STORE, WAREHOUSE = "prod", "prod-warehouse"
WORKERS = "fm-ray-workers-prod"
SETTINGS = load_settings({"FM_HOME": "/nonexistent/fm"})  # for the platform namespace's name
CONFIG = "0123456789ab-s2048"
BATCH = "b-0123456789abcdef0123"


@dataclass
class IdentityStore:
    """The SeaweedFS server and the key pair of each identity of the example config."""

    server: S3Server
    keys: dict[str, tuple[str, str]]

    def fs(self, identity: str) -> pafs.S3FileSystem:
        access, secret = self.keys[identity]
        return pafs.S3FileSystem(
            access_key=access,
            secret_key=secret,
            region=self.server.region,
            endpoint_override=self.server.endpoint.removeprefix("http://"),
            scheme="http",
        )

    def client(self, identity: str) -> Any:
        import boto3
        from botocore.config import Config

        access, secret = self.keys[identity]
        return boto3.client(
            "s3",
            endpoint_url=self.server.endpoint,
            aws_access_key_id=access,
            aws_secret_access_key=secret,
            region_name=self.server.region,
            config=Config(retries={"max_attempts": 1}),
        )

    def env(self, identity: str) -> dict[str, str]:
        access, secret = self.keys[identity]
        return {
            "AWS_ACCESS_KEY_ID": access,
            "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_REGION": self.server.region,
        }


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IdentityStore]:
    config = json.loads((IAM / "seaweedfs-identities.example.json").read_text())
    keys: dict[str, tuple[str, str]] = {}
    for identity in config["identities"]:
        name = identity["name"]
        if name == WORKERS:  # the key the session Ray's nodes hold (tests/conftest.py)
            keys[name] = (s3_service.ACCESS_KEY, s3_service.SECRET_KEY)
        else:
            keys[name] = (f"{name}-{secrets.token_hex(4)}", secrets.token_hex(16))
        (credential,) = identity["credentials"]
        credential["accessKey"], credential["secretKey"] = keys[name]
    directory = tmp_path_factory.mktemp("seaweedfs-identities")
    with seaweedfs_s3(
        directory, bucket=BUCKET, identities=config, admin=keys["fm-admin"]
    ) as server:
        found = IdentityStore(server, keys)
        admin = found.client("fm-admin")
        policy = (IAM / "seaweedfs-bucket-policy.example.json").read_text()
        admin.put_bucket_policy(Bucket=BUCKET, Policy=policy)
        # As docs/deploy.md asks of a production bucket: an overwrite keeps the old bytes.
        admin.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        yield found


def _data_file(namespace: str, table: str = "raw_documents") -> str:
    prefix = f"{WAREHOUSE}/{catalog_namespace(SETTINGS, namespace)}/{table}"
    return f"{prefix}/data/batch_id={BATCH}/namespace={namespace}/00000-0-6e0a.parquet"


def _metadata(namespace: str | None, table: str = "raw_documents") -> str:
    prefix = f"{WAREHOUSE}/{catalog_namespace(SETTINGS, namespace)}/{table}"
    return f"{prefix}/metadata/00003-1f.metadata.json"


def _shard(namespaces: list[str]) -> str:
    return f"{STORE}/{shard_set_prefix('web@v3', CONFIG, namespaces)}/shard.00000.mds"


def _text(namespaces: list[str]) -> str:
    return f"{STORE}/{text_set_prefix('web@v3', namespaces)}/shard.00000.mds"


def _landed(namespace: str) -> str:
    return f"{STORE}/{data_prefix(namespace, BATCH)}/0123456789abcdef-a.jsonl"


# What the control plane committed, by kind: the keys the platform's layout functions give.
COMMITTED = {
    "landed file": _landed("cloud"),
    "landing manifest": f"{STORE}/landing/batches/{BATCH}/manifest.json",
    "table data file": _data_file("cloud"),
    "table metadata": _metadata("cloud"),
    "platform table metadata": _metadata(None, "shard_sets"),
    "shard": _shard(["cloud"]),
    "text set": _text(["cloud"]),
    "registry copy": f"{STORE}/registries/tokenizers/0123456789abcdef.json",
}
REFUSED_TO_CLOUD_TRAINERS = {
    "on-device shard": _shard(["on-device"]),
    "mixed shard": _shard(["cloud", "on-device"]),
    "on-device text set": _text(["on-device"]),
    "on-device landed file": _landed("on-device"),
    "on-device data file": _data_file("on-device"),
    "on-device table metadata": _metadata("on-device"),
    "quarantined landed file": _landed("quarantine"),
}


def _write(fs: pafs.S3FileSystem, key: str, data: bytes) -> None:
    with fs.open_output_stream(f"{BUCKET}/{key}", compression=None) as f:
        f.write(data)


def _read(fs: pafs.S3FileSystem, key: str) -> bytes:
    with fs.open_input_stream(f"{BUCKET}/{key}", compression=None) as f:
        data: bytes = f.read()
    return data


def _denied(error: BaseException) -> bool:
    return "ACCESS_DENIED" in str(error) or "AccessDenied" in str(error)


@pytest.fixture(scope="module")
def committed(store: IdentityStore) -> dict[str, bytes]:
    platform = store.fs("fm-platform-prod")
    written = {}
    for key in [*COMMITTED.values(), *REFUSED_TO_CLOUD_TRAINERS.values()]:
        written[key] = f"committed {key}".encode()
        _write(platform, key, written[key])
    return written


def test_workers_create_new_table_data_files(store: IdentityStore) -> None:
    key = _data_file("cloud").replace("00000-0-6e0a", f"00001-0-{secrets.token_hex(4)}")
    _write(store.fs(WORKERS), key, b"a new data file")
    assert _read(store.fs("fm-platform-prod"), key) == b"a new data file"


@pytest.mark.parametrize("kind", sorted(COMMITTED))
def test_workers_delete_nothing(
    store: IdentityStore, committed: dict[str, bytes], kind: str
) -> None:
    key = COMMITTED[kind]
    with pytest.raises(OSError) as refused:
        store.fs(WORKERS).delete_file(f"{BUCKET}/{key}")
    assert _denied(refused.value), refused.value
    # The batch form of DELETE too.
    answer = store.client(WORKERS).delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": key}]})
    assert [e["Code"] for e in answer.get("Errors", [])] == ["AccessDenied"], answer
    assert _read(store.fs("fm-platform-prod"), key) == committed[key]


@pytest.mark.parametrize("kind", sorted(set(COMMITTED) - {"table data file"}))
def test_workers_write_nothing_but_table_data_files(
    store: IdentityStore, committed: dict[str, bytes], kind: str
) -> None:
    key = COMMITTED[kind]
    for target in (key, f"{key}.new"):  # neither rewrite it nor add beside it
        with pytest.raises(OSError) as refused:
            _write(store.fs(WORKERS), target, b"forged")
        assert _denied(refused.value), (target, refused.value)
    assert _read(store.fs("fm-platform-prod"), key) == committed[key]


def test_the_control_plane_commits_and_deletes(store: IdentityStore) -> None:
    platform = store.fs("fm-platform-prod")
    key = _metadata("cloud").replace("00003", "00004")
    _write(platform, key, b"a commit")
    platform.delete_file(f"{BUCKET}/{key}")
    assert platform.get_file_info(f"{BUCKET}/{key}").type == pafs.FileType.NotFound
    # ... under its own deployment's prefixes only.
    with pytest.raises(OSError) as refused:
        _write(platform, "staging/landing/x", b"elsewhere")
    assert _denied(refused.value)


@pytest.mark.parametrize("kind", sorted(REFUSED_TO_CLOUD_TRAINERS))
def test_a_cloud_trainer_is_refused_on_device_and_quarantined_objects(
    store: IdentityStore, committed: dict[str, bytes], kind: str
) -> None:
    with pytest.raises(OSError) as refused:
        _read(store.fs("fm-trainers-cloud"), REFUSED_TO_CLOUD_TRAINERS[kind])
    assert _denied(refused.value), refused.value
    # The on-device trainer holds that right, for shard and text sets only.
    on_device = store.fs("fm-trainers-on-device")
    if "shard" in kind or "text" in kind:
        assert (
            _read(on_device, REFUSED_TO_CLOUD_TRAINERS[kind])
            == committed[REFUSED_TO_CLOUD_TRAINERS[kind]]
        )
    else:
        with pytest.raises(OSError):
            _read(on_device, REFUSED_TO_CLOUD_TRAINERS[kind])


def test_a_cloud_trainer_reads_what_make_dataset_reads_of_cloud_data(
    store: IdentityStore, committed: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the loader's own client (`fm_loader.remote`, the standard AWS credential chain):
    cloud shard and text sets and the platform's shard_sets table, and no landed data."""
    from fm_loader.remote import filesystem_for

    for name, value in store.env("fm-trainers-cloud").items():
        monkeypatch.setenv(name, value)
    for kind in ("shard", "text set", "platform table metadata"):
        fs, path = filesystem_for(f"s3://{BUCKET}/{COMMITTED[kind]}", store.server.endpoint)
        with fs.open_input_stream(path, compression=None) as f:
            assert f.read() == committed[COMMITTED[kind]]
    fs, path = filesystem_for(f"s3://{BUCKET}/{COMMITTED['landed file']}", store.server.endpoint)
    with pytest.raises(OSError) as refused:
        fs.open_input_stream(path, compression=None).read()
    assert _denied(refused.value)


def _tiny_batch(directory: Path) -> Path:
    path = directory / "notes.jsonl"
    path.write_text(
        "".join(
            json.dumps({"id": f"n{i}", "text": f"Field note {i} on tides and herons. " * 30}) + "\n"
            for i in range(12)
        )
    )
    return path


def test_a_batch_commits_with_its_workers_on_the_workers_identity(
    store: IdentityStore,
    ray_address: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fm_assets.checks.integrity import verify
    from fm_assets.commands import operations
    from fm_assets.execution import pipeline
    from fm_assets.registries.tokenizers import register_tokenizer
    from fm_assets.storage import bookkeeping
    from tests.conftest import ray_workers_with

    home = tmp_path / "fm"
    env = {
        "FM_HOME": str(home),
        "DAGSTER_HOME": str(home / "dagster"),
        "FM_OBJECT_STORE": f"s3://{BUCKET}/{STORE}",
        "FM_WAREHOUSE": f"s3://{BUCKET}/{WAREHOUSE}",
        "FM_S3_ENDPOINT": store.server.endpoint,
        "FM_POLICY_FILE": str(opt_out_policy(tmp_path)),  # the subject is storage rights
        **store.env("fm-platform-prod"),  # the driver: the control plane
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # The workers: the session Ray's nodes hold the key this store gives the workers' identity.
    ray_workers_with(s3_credentials())
    settings = load_settings()
    register_tokenizer(settings, NEOX_TOKENIZER, make_default=True)
    batch, _ = operations.land(settings, [_tiny_batch(tmp_path)], source="notes", license="CC0-1.0")
    operations.run_batch(settings, batch.batch_id, lambda message: None)
    runs = {r["stage"] for r in bookkeeping.stage_runs(settings) if r["batch_id"] == batch.batch_id}
    assert runs == set(pipeline.STAGE_NAMES)
    version = operations.create_version(settings, "notes", [batch.batch_id], lambda m: None)
    assert verify(settings, version).ok

    # A worker replaces a committed data file: the store cannot refuse it (see the docstring).
    platform = store.fs("fm-platform-prod")
    data = f"{BUCKET}/{WAREHOUSE}/fm_cloud/raw_documents/data/batch_id={batch.batch_id}"
    selector = pafs.FileSelector(data, recursive=True)
    (data_file,) = [
        i.path for i in platform.get_file_info(selector) if i.type == pafs.FileType.File
    ]
    original = _read(platform, data_file.removeprefix(f"{BUCKET}/"))
    with store.fs(WORKERS).open_output_stream(data_file, compression=None) as f:
        f.write(original[:-8] + b"\0" * 8)
    result = verify(settings, version)
    assert [bad.location for bad in result.bad] == [f"s3://{data_file}"], result.bad
    # The committed bytes are a version the worker cannot delete; the platform puts them back.
    admin = store.client("fm-admin")
    key = data_file.removeprefix(f"{BUCKET}/")
    versions = admin.list_object_versions(Bucket=BUCKET, Prefix=key)["Versions"]
    (committed_version,) = [v["VersionId"] for v in versions if not v["IsLatest"]]
    with pytest.raises(Exception, match="AccessDenied"):
        store.client(WORKERS).delete_object(Bucket=BUCKET, Key=key, VersionId=committed_version)
    kept = (
        store.client("fm-platform-prod")
        .get_object(Bucket=BUCKET, Key=key, VersionId=committed_version)["Body"]
        .read()
    )
    assert kept == original
    _write(platform, key, kept)
    assert verify(settings, version).ok
