"""From what a trainer names ("web@v1" or a directory) to one verified, compatible shard set.

Version keys are looked up read-only in the Iceberg table `<namespace>.shard_sets`; a version may
have several shard sets (one per tokenizer x seq_len), and `seq_len` / tokenizer pick one. A set
published on S3 is served from the node-local cache (`fm_loader.storage.cache`), keyed by the
manifest hash the catalog pinned.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fm_loader.format.manifest import (
    ShardSetManifest,
    local_directory,
    read_manifest_bytes,
    schema_fingerprint,
)
from fm_loader.settings import CatalogLocation, load_loader_settings
from fm_loader.storage.cache import EntryPin, is_remote, open_cached
from fm_loader.storage.fetch import CacheUse, RemoteShards, remote_manifest_sha256
from fm_loader.storage.remote import iceberg_s3_properties

VERSION_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*@v[0-9]+")
SHARD_SET_KEY = re.compile(r"(?P<version>[A-Za-z0-9][A-Za-z0-9_.\-]*@v[0-9]+)/[0-9a-f]{12}-s[0-9]+")
BUILD_HINT = "build it with `fm shards build {version} --tokenizer PATH --seq-len N`"


@dataclass(frozen=True)
class ResolvedShardSet:
    """A shard set located, its manifest read, and the manifest's bytes hashed."""

    source: str  # what the caller asked for
    directory: Path  # local: the set itself, or its cache entry when it is published remotely
    manifest: ShardSetManifest
    manifest_sha256: str
    remote: RemoteShards | None = None  # where `directory` was downloaded from, if cached
    pin: EntryPin | None = None  # holds the cache entry open (no eviction) while in use
    cache_use: CacheUse | None = None  # what opening the cached copy cost


@dataclass(frozen=True)
class Location:
    """Where one registered (or named) set is published, and the manifest hash pinning it."""

    shard_set_key: str
    uri: str
    manifest_sha256: str


def tokenizer_file_hash(path: str | Path) -> str:
    """sha256 of a tokenizer.json file's bytes: the platform's tokenizer identity."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def resolve_shard_set(
    source: str,
    *,
    seq_len: int | None = None,
    tokenizer_hash: str | None = None,
    settings: CatalogLocation | None = None,
    cache_dir: Path | None = None,
) -> ResolvedShardSet:
    """Locate a shard set by version key (through the catalog) or by directory / file:// URI.

    A version whose set is published on S3 is downloaded once into `cache_dir` (default
    `~/.cache/fm_loader`), reaching the store at `settings.s3_endpoint`.
    """
    remote = None
    cached = None
    if VERSION_KEY.fullmatch(source):
        settings = settings or load_loader_settings()
        row = _select_row(source, catalog_rows(source, settings), seq_len, tokenizer_hash)
        if is_remote(row["uri"]):
            cached = open_cached(
                row["uri"],
                row["manifest_sha256"],
                cache_dir=cache_dir,
                s3_endpoint=settings.s3_endpoint,
            )
            directory = cached.directory
            remote = RemoteShards(row["uri"], directory, settings.s3_endpoint)
        else:
            directory = local_directory(row["uri"])
        data = read_manifest_bytes(directory)
        digest = hashlib.sha256(data).hexdigest()
        if digest != row["manifest_sha256"]:
            raise ValueError(
                f"the manifest of {row['shard_set_key']} at {row['uri']} has sha256 {digest}, "
                f"but the catalog registered {row['manifest_sha256']}: the shard set changed "
                f"after it was registered; {BUILD_HINT.format(version=source)}"
            )
        manifest = ShardSetManifest.from_json(data.decode("utf-8"))
        if manifest.source_version != source:
            raise ValueError(
                f"catalog row for {source} points at {row['uri']}, whose manifest says it was "
                f"built from {manifest.source_version}; {BUILD_HINT.format(version=source)}"
            )
    else:
        if is_remote(source):
            # Named by location, the set is pinned by the manifest published now; the cache
            # entry is keyed by that hash, so a later rebuild can never be mixed with this copy.
            settings = settings or load_loader_settings()
            digest = remote_manifest_sha256(source, settings.s3_endpoint)
            cached = open_cached(
                source, digest, cache_dir=cache_dir, s3_endpoint=settings.s3_endpoint
            )
            directory = cached.directory
            remote = RemoteShards(source, directory, settings.s3_endpoint)
        else:
            directory = local_directory(source)
        data = read_manifest_bytes(directory)
        manifest = ShardSetManifest.from_json(data.decode("utf-8"))
    return ResolvedShardSet(
        source=source,
        directory=directory,
        manifest=manifest,
        manifest_sha256=hashlib.sha256(data).hexdigest(),
        remote=remote,
        pin=cached.pin if cached is not None else None,
        cache_use=cached.use if cached is not None else None,
    )


def shard_set_locations(
    source: str,
    *,
    seq_len: int | None = None,
    tokenizer_hash: str | None = None,
    settings: CatalogLocation | None = None,
) -> list[Location]:
    """Every shard set `source` names: a version key (each of its latest shard sets matching
    seq_len / tokenizer), a shard-set key (`web@v3/<tokenizer[:12]>-s<seq_len>`) or a URI."""
    match = SHARD_SET_KEY.fullmatch(source)
    if match or VERSION_KEY.fullmatch(source):
        version = match["version"] if match else source
        settings = settings or load_loader_settings()
        latest = _latest_rows(version, catalog_rows(version, settings))
        chosen = [
            row
            for row in latest.values()
            if (not match or row["shard_set_key"] == source)
            and _matches(row, seq_len, tokenizer_hash)
        ]
        if not chosen:
            available = "; ".join(_describe(r) for r in sorted(latest.values(), key=_describe))
            raise ValueError(f"no shard set {source} matches; available: {available}")
        return [
            Location(r["shard_set_key"], r["uri"], r["manifest_sha256"])
            for r in sorted(chosen, key=lambda r: str(r["shard_set_key"]))
        ]
    if is_remote(source):
        settings = settings or load_loader_settings()
        digest = remote_manifest_sha256(source, settings.s3_endpoint)
        return [Location(source, source, digest)]
    data = read_manifest_bytes(local_directory(source))
    key = ShardSetManifest.from_json(data.decode("utf-8")).shard_set_key
    return [Location(key, source, hashlib.sha256(data).hexdigest())]


def catalog_rows(
    version_key: str, settings: CatalogLocation, table_name: str = "shard_sets"
) -> list[dict[str, Any]]:
    """Rows of `shard_sets` (or `text_sets`) for one version, read-only; [] when the catalog or
    the table is absent."""
    sqlite_path = settings.catalog_uri.removeprefix("sqlite:///")
    if sqlite_path != settings.catalog_uri and not Path(sqlite_path).exists():
        # SqlCatalog would create an empty database file: a loader must not write.
        return []
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
    from pyiceberg.expressions import EqualTo

    properties = {
        "uri": settings.catalog_uri,
        "warehouse": settings.warehouse,
        "init_catalog_tables": "false",  # read-only: never create the catalog's own tables
    }
    if settings.s3_endpoint:
        # Same FileIO settings as the platform's writers (a warehouse on an S3-compatible store).
        properties |= iceberg_s3_properties(settings.s3_endpoint)
    catalog = SqlCatalog(settings.catalog_name, **properties)
    try:
        table = catalog.load_table(f"{settings.namespace}.{table_name}")
    except (NoSuchTableError, NoSuchNamespaceError):
        return []
    # mypy reads EqualTo's pydantic fields, not its positional __init__.
    scan = table.scan(row_filter=EqualTo("version_key", version_key))  # type: ignore[call-arg,arg-type]
    rows: list[dict[str, Any]] = scan.to_arrow().to_pylist()
    return rows


def _describe(row: dict[str, Any]) -> str:
    return f"{row['shard_set_key']} (seq_len={row['seq_len']}, tokenizer={row['tokenizer_hash']})"


def _latest_rows(version_key: str, rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A version's catalog rows by shard-set key; refuses a version with none."""
    if not rows:
        raise ValueError(
            f"unknown dataset version {version_key}: no shard set is registered for it; "
            + BUILD_HINT.format(version=version_key)
        )
    # A rebuilt shard set appends a new row under the same key: the latest registration wins.
    latest: dict[str, dict[str, Any]] = {}
    for row in sorted(rows, key=lambda r: r["created_at"]):
        latest[row["shard_set_key"]] = row
    return latest


def _matches(row: dict[str, Any], seq_len: int | None, tokenizer_hash: str | None) -> bool:
    return (seq_len is None or row["seq_len"] == seq_len) and (
        tokenizer_hash is None or row["tokenizer_hash"] == tokenizer_hash
    )


def _select_row(
    version_key: str,
    rows: list[dict[str, Any]],
    seq_len: int | None,
    tokenizer_hash: str | None,
) -> dict[str, Any]:
    """Pick the one shard set of a version matching seq_len / tokenizer, or say how to choose."""
    latest = _latest_rows(version_key, rows)
    candidates = [row for row in latest.values() if _matches(row, seq_len, tokenizer_hash)]
    available = "; ".join(_describe(r) for r in sorted(latest.values(), key=_describe))
    if not candidates:
        raise ValueError(
            f"no shard set of {version_key} matches seq_len={seq_len}, "
            f"tokenizer hash={tokenizer_hash}. Available: {available}. Pass a matching "
            f"seq_len= / tokenizer=, or {BUILD_HINT.format(version=version_key)}"
        )
    if len(candidates) > 1:
        raise ValueError(
            f"{version_key} has {len(candidates)} shard sets matching seq_len={seq_len}, "
            f"tokenizer hash={tokenizer_hash}: {available}. Choose one with seq_len= and/or "
            "tokenizer= (a tokenizer.json path)"
        )
    return candidates[0]


def check_compatible(
    manifest: ShardSetManifest,
    *,
    seq_len: int | None = None,
    tokenizer_hash: str | None = None,
    expected_tokenizer_hash: str | None = None,
    expected_schema_fingerprint: str | None = None,
) -> None:
    """Refuse a shard set this trainer or this loader version cannot serve correctly."""
    where = f"shard set {manifest.shard_set_key}"
    rebuild = BUILD_HINT.format(version=manifest.source_version)
    ours = schema_fingerprint(manifest.seq_len, manifest.token_dtype)
    if manifest.schema_fingerprint != ours:
        raise ValueError(
            f"{where} has schema fingerprint {manifest.schema_fingerprint}, but this loader "
            f"computes {ours} for seq_len={manifest.seq_len}, dtype={manifest.token_dtype}: it "
            f"was written with a different column layout. Upgrade fm_loader to match the "
            f"writer, or {rebuild}"
        )
    if expected_schema_fingerprint is not None and expected_schema_fingerprint != ours:
        raise ValueError(
            f"{where} has schema fingerprint {manifest.schema_fingerprint}, the trainer expects "
            f"{expected_schema_fingerprint}. Use a shard set written with the expected layout "
            f"or update the trainer's expected fingerprint; {rebuild}"
        )
    for label, wanted in (
        ("expected_tokenizer_hash", expected_tokenizer_hash),
        ("tokenizer file", tokenizer_hash),
    ):
        if wanted is not None and wanted != manifest.tokenizer_hash:
            raise ValueError(
                f"{where} was tokenized with tokenizer {manifest.tokenizer_hash}, but the "
                f"trainer's {label} has hash {wanted}. Train with the shard set's tokenizer, or "
                f"build a shard set for yours: `fm shards build {manifest.source_version} "
                "--tokenizer PATH --seq-len N`"
            )
    if seq_len is not None and seq_len != manifest.seq_len:
        raise ValueError(
            f"{where} has seq_len {manifest.seq_len}, the trainer asked for {seq_len}. Pass "
            f"seq_len={manifest.seq_len}, or build one: `fm shards build "
            f"{manifest.source_version} --tokenizer PATH --seq-len {seq_len}`"
        )


def location_of(resolved: ResolvedShardSet) -> tuple[str, str | None]:
    """Where a shard set is published (its remote URI when served from the cache) and the S3
    endpoint reaching it."""
    if resolved.remote is not None:
        return resolved.remote.uri, resolved.remote.s3_endpoint
    return str(resolved.directory), None


def check_same_layout(resolved: Sequence[ResolvedShardSet]) -> None:
    """Mixed sources must share tokenizer, seq_len and schema: samples are stacked together."""
    first = resolved[0].manifest
    for other in resolved[1:]:
        m = other.manifest
        for name in ("tokenizer_hash", "seq_len", "schema_fingerprint", "pad_token_id"):
            if getattr(m, name) != getattr(first, name):
                raise ValueError(
                    f"mixture sources {resolved[0].source!r} and {other.source!r} differ in "
                    f"{name} ({getattr(first, name)!r} vs {getattr(m, name)!r}); mix shard "
                    "sets built with the same tokenizer and seq_len (pass seq_len= and "
                    "tokenizer= to pick them)"
                )
