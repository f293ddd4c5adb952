"""`fm verify`: every file a dataset version or shard set stands on, checked against what pins it.

- landed files: sha256 and size against the landing manifest, whose file hashes must still give
  the batch id (the id is a hash of them) and whose own sha256 must be the one pinned when the
  raw stage first read the batch; a file a purge deleted or blanked records in, against what the
  purge recorded (`storage.purge.landing_files`);
- Iceberg: the manifest list and manifests of the version's snapshot against the sha256 pinned
  when the platform committed them (Avro has no checksum of its own); each data file must have
  the size its manifest records and the sha256 pinned when it was committed (Parquet's page
  CRCs miss flips in page headers and the footer); a data file with no pin (written by an
  older version of the platform) must decode with every page's CRC checked and hold the row
  count its manifest records;
- shard sets: the manifest's sha256 against the catalog row, each shard's sha256 and size against
  the manifest, and MDS's index.json must parse.

Nothing is consumed: a bad file is named with what is wrong, and the command exits non-zero.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from fm_assets.settings import Settings
from fm_assets.shards.build import read_shard_set_row
from fm_assets.storage import catalog
from fm_assets.storage.bookkeeping import file_checksums
from fm_assets.storage.data_files import file_sha256, plan_files
from fm_assets.storage.landing import batch_id_for, manifest_checksum, read_manifest
from fm_assets.storage.objectstore import open_object_store
from fm_assets.storage.purge.landing_files import landed_state
from fm_assets.versions.dataset_version import parse_version_key, require_version
from fm_loader.format.manifest import INDEX_NAME, MANIFEST_NAME, parse_manifest
from fm_loader.storage.remote import filesystem_for


@dataclass(frozen=True)
class BadFile:
    location: str
    problem: str


@dataclass
class Verification:
    """What was checked (files per kind) and every file found bad."""

    subject: str
    checked: Counter[str] = field(default_factory=Counter)
    bad: list[BadFile] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.bad

    def flag(self, location: str, problem: str) -> None:
        self.bad.append(BadFile(location, problem))


def verify(settings: Settings, key: str) -> Verification:
    """Verify a dataset version (`web@v3`) with its shard sets, or one shard set
    (`web@v3/<config>`)."""
    if "/" in key:
        result = Verification(key)
        _shard_set(settings, key, result)
        return result
    parse_version_key(key)  # a malformed key fails here, saying what a key looks like
    result = Verification(key)
    version = require_version(settings, key)
    _landed_files(settings, list(version.batches), result)
    for namespace, snapshots in sorted(version.snapshot_ids.items()):
        for table, snapshot_id in sorted(snapshots.items()):
            _table_files(settings, table, namespace, list(version.batches), snapshot_id, result)
    shard_sets = catalog.read_table(
        settings, "shard_sets", row_filter=catalog.where_equal("version_key", key)
    )
    for shard_set_key in sorted(set(shard_sets.column("shard_set_key").to_pylist())):
        _shard_set(settings, shard_set_key, result)
    return result


def _landed_files(settings: Settings, batches: list[str], result: Verification) -> None:
    store = open_object_store(settings)
    for batch_id in batches:
        manifest_uri = store.uri(f"landing/batches/{batch_id}/manifest.json")
        try:
            manifest = read_manifest(store, batch_id)
            _, sha, size = manifest_checksum(store, batch_id)
        except Exception as exc:  # garbage JSON, missing fields: name the manifest
            result.flag(manifest_uri, f"the landing manifest does not read: {exc}")
            continue
        result.checked["landing manifests"] += 1
        pinned = file_checksums(settings, [manifest_uri]).get(manifest_uri)
        if pinned is not None and pinned != (sha, size):
            # Its file entries cannot be trusted either: the manifest is what is named.
            result.flag(
                manifest_uri,
                f"sha256 {sha} ({size} bytes), pinned {pinned[0]} ({pinned[1]} bytes) when the "
                "batch was first read: modified",
            )
            continue
        if batch_id_for(f.sha256 for f in manifest.files) != batch_id:
            result.flag(manifest_uri, "its file hashes no longer give its batch id: modified")
        # A purge deletes landed files or blanks records in them, and records what it left.
        purged = landed_state(store, batch_id)
        for landed in manifest.files:
            uri = store.uri(landed.key)
            expected = purged.get(landed.key, (landed.sha256, landed.size))
            if expected is None:
                result.checked["landed files deleted by a purge"] += 1
                continue
            result.checked["landed files"] += 1
            try:
                sha, size = file_sha256(store.fs, store.path(landed.key))
            except FileNotFoundError:
                result.flag(uri, "missing")
                continue
            if (sha, size) != expected:
                said = "a purge left" if landed.key in purged else "the manifest says"
                result.flag(
                    uri,
                    f"sha256 {sha} ({size} bytes), {said} {expected[0]} ({expected[1]} bytes)",
                )


def _table_files(
    settings: Settings,
    table: str,
    namespace: str,
    batches: list[str],
    snapshot_id: int,
    result: Verification,
) -> None:
    identifier = catalog.table_identifier(settings, table, namespace)
    where = f"table {identifier} at snapshot {snapshot_id}"
    if not _manifests_intact(settings, table, namespace, snapshot_id, where, result):
        return  # a scan through a corrupt manifest could return the wrong files
    try:
        tasks = plan_files(
            settings, table, catalog.where_in("batch_id", batches), snapshot_id, namespace
        )
    except Exception as exc:  # unreadable metadata JSON, manifest list or manifest
        result.flag(where, f"its Iceberg metadata does not read: {type(exc).__name__}: {exc}")
        return
    result.checked["Iceberg snapshots"] += 1
    pinned = file_checksums(settings, [task.file.file_path for task in tasks])
    for task in tasks:
        data_file = task.file
        result.checked["Iceberg data files"] += 1
        fs, path = filesystem_for(data_file.file_path, settings.s3_endpoint)
        info = fs.get_file_info(path)
        if info.type != pafs.FileType.File:
            result.flag(data_file.file_path, f"missing (referenced by {where})")
            continue
        if info.size != data_file.file_size_in_bytes:
            result.flag(
                data_file.file_path,
                f"{info.size} bytes, its manifest says {data_file.file_size_in_bytes}",
            )
            continue
        if data_file.file_path in pinned:
            sha, size = file_sha256(fs, path)
            if (sha, size) != pinned[data_file.file_path]:
                pin = pinned[data_file.file_path][0]
                result.flag(
                    data_file.file_path, f"sha256 {sha} ({size} bytes), pinned at commit as {pin}"
                )
            continue
        result.checked["Iceberg data files without a pinned checksum"] += 1
        try:
            rows = _decode_with_checksums(fs, path)
        except Exception as exc:
            result.flag(data_file.file_path, f"does not decode: {type(exc).__name__}: {exc}")
            continue
        if rows != data_file.record_count:
            expected = data_file.record_count
            result.flag(data_file.file_path, f"{rows} rows, its manifest says {expected}")


def _manifests_intact(
    settings: Settings,
    table: str,
    namespace: str,
    snapshot_id: int,
    where: str,
    result: Verification,
) -> bool:
    """Compare the snapshot's manifest list and manifests with the checksums pinned at commit."""
    iceberg = catalog.load_table(settings, table, namespace=namespace)
    snapshot = iceberg.snapshot_by_id(snapshot_id)
    if snapshot is None:
        result.flag(where, "the snapshot is gone from the table's metadata")
        return False
    paths = [snapshot.manifest_list]
    try:
        paths += [m.manifest_path for m in snapshot.manifests(iceberg.io)]
    except Exception as exc:
        result.flag(snapshot.manifest_list, f"the manifest list does not read: {exc}")
        return False
    pinned = file_checksums(settings, paths)
    intact = True
    for path in paths:
        if path not in pinned:
            result.checked["Iceberg manifests without a pinned checksum"] += 1
            continue
        result.checked["Iceberg manifests"] += 1
        fs, inner = filesystem_for(path, settings.s3_endpoint)
        try:
            sha, size = file_sha256(fs, inner)
        except FileNotFoundError:
            result.flag(path, f"missing (referenced by {where})")
            intact = False
            continue
        if (sha, size) != pinned[path]:
            result.flag(path, f"sha256 {sha} ({size} bytes), pinned at commit as {pinned[path][0]}")
            intact = False
    return intact


def _decode_with_checksums(fs: pafs.FileSystem, path: str) -> int:
    """Decode every row group (bounded memory), checking each page's CRC; return the rows."""
    with fs.open_input_file(path) as source:
        parquet = pq.ParquetFile(source, page_checksum_verification=True)
        return sum(parquet.read_row_group(i).num_rows for i in range(parquet.num_row_groups))


def _shard_set(settings: Settings, key: str, result: Verification) -> None:
    row = read_shard_set_row(settings, key)
    if row is None:
        raise ValueError(f"no shard set {key!r}; list them with `fm status`")
    uri = str(row["uri"]).rstrip("/")
    fs, root = filesystem_for(uri, settings.s3_endpoint)
    manifest_uri = f"{uri}/{MANIFEST_NAME}"
    result.checked["shard-set manifests"] += 1
    try:
        with fs.open_input_stream(f"{root}/{MANIFEST_NAME}", compression=None) as f:
            manifest_bytes = f.read()
    except FileNotFoundError:
        result.flag(manifest_uri, "missing")
        return
    sha = hashlib.sha256(manifest_bytes).hexdigest()
    if sha != row["manifest_sha256"]:
        result.flag(manifest_uri, f"sha256 {sha}, the catalog pins {row['manifest_sha256']}")
        return
    manifest = parse_manifest(manifest_bytes.decode())
    try:
        with fs.open_input_stream(f"{root}/{INDEX_NAME}", compression=None) as f:
            index = json.loads(f.read())
        if len(index["shards"]) != len(manifest.shards):
            listed = len(manifest.shards)
            raise ValueError(f"{len(index['shards'])} shards, the manifest lists {listed}")
    except Exception as exc:
        result.flag(f"{uri}/{INDEX_NAME}", f"does not match the manifest: {exc}")
    for shard in manifest.shards:
        result.checked["MDS shards"] += 1
        try:
            sha, size = file_sha256(fs, f"{root}/{shard.name}")
        except FileNotFoundError:
            result.flag(f"{uri}/{shard.name}", "missing")
            continue
        if (sha, size) != (shard.sha256, shard.bytes):
            result.flag(
                f"{uri}/{shard.name}",
                f"sha256 {sha} ({size} bytes), "
                f"the manifest says {shard.sha256} ({shard.bytes} bytes)",
            )
