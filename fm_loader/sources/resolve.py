"""From what a trainer names to open, checked sets: one resolution for every kind of set.

A source is a version key ("web@v3": its set registered in the catalog, `fm_loader.sources.
catalog`), an `s3://` URI (pinned by the manifest published there now) or a local directory /
file:// URI. A set published on S3 is served from the node-local cache (`fm_loader.storage.
cache`), in the entry named by the manifest hash that pins it; a local one is read in place.
Either way the manifest read must hash to the pinned value. Then the startup checks: a shard
set must match the trainer's seq_len, tokenizer and schema, and no set may be revoked or hold a
data namespace the job may not read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from fm_loader.format.manifest import SHARD_SETS, ShardSetManifest, local_directory
from fm_loader.format.set_format import SetFormat, SetManifest
from fm_loader.format.text_set import TEXT_SETS, TextSetManifest
from fm_loader.options import LoaderOptions
from fm_loader.settings import CatalogLocation, load_loader_settings
from fm_loader.sources.catalog import VERSION_KEY, Location, published_set
from fm_loader.sources.provenance import refuse_namespaces, refuse_revoked
from fm_loader.storage.cache import EntryPin, is_remote, open_cached
from fm_loader.storage.fetch import CacheUse, RemoteShards, remote_manifest_sha256

M = TypeVar("M", bound=SetManifest)


@dataclass(frozen=True)
class ResolvedSet(Generic[M]):
    """A set located (in place, or complete in the node cache), its manifest read and hashed."""

    source: str  # what the caller asked for
    directory: Path  # local: the set itself, or its cache entry when it is published remotely
    manifest: M
    manifest_sha256: str
    remote: RemoteShards | None = None  # where `directory` was downloaded from, if cached
    pin: EntryPin | None = None  # holds the cache entry open (no eviction) while in use
    cache_use: CacheUse | None = None  # what opening the cached copy cost


def tokenizer_file_hash(path: str | Path) -> str:
    """sha256 of a tokenizer.json file's bytes: the platform's tokenizer identity."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def resolve_set(
    source: str,
    set_format: SetFormat[M],
    *,
    settings: CatalogLocation | None = None,
    cache_dir: Path | None = None,
    seq_len: int | None = None,
    tokenizer_hash: str | None = None,
) -> ResolvedSet[M]:
    """Locate a set of `set_format` by version key (through the catalog; `seq_len` and
    `tokenizer_hash` choose among a version's shard sets), `s3://` URI, or directory / file://
    URI. A remote set is downloaded once into `cache_dir` (default `~/.cache/fm_loader`),
    reaching the store at `settings.s3_endpoint`."""
    pinned: Location | None = None
    if VERSION_KEY.fullmatch(source):
        settings = settings or load_loader_settings()
        pinned = published_set(
            source, set_format, settings, seq_len=seq_len, tokenizer_hash=tokenizer_hash
        )
        uri, digest = pinned.uri, pinned.manifest_sha256
    elif is_remote(source):
        # Named by location, the set is pinned by the manifest published now; the cache entry is
        # keyed by that hash, so a later rebuild can never be mixed with this copy.
        settings = settings or load_loader_settings()
        uri = source
        digest = remote_manifest_sha256(source, settings.s3_endpoint, set_format.manifest_name)
    else:
        uri, digest = source, None
    remote = cached = None
    if is_remote(uri):
        endpoint = settings.s3_endpoint if settings is not None else None
        cached = open_cached(
            uri, str(digest), cache_dir=cache_dir, s3_endpoint=endpoint, set_format=set_format
        )
        directory = cached.directory
        remote = RemoteShards(uri, directory, endpoint, set_format.manifest_name)
    else:
        directory = local_directory(uri)
    data = _manifest_bytes(directory, set_format)
    found = hashlib.sha256(data).hexdigest()
    if pinned is not None and found != pinned.manifest_sha256:
        raise ValueError(
            f"the manifest of {pinned.shard_set_key} at {uri} has sha256 {found}, but the "
            f"catalog registered {pinned.manifest_sha256}: the {set_format.noun} changed after "
            f"it was registered; {set_format.hint(source)}"
        )
    manifest = set_format.parse(data)
    if pinned is not None and manifest.source_version != source:
        raise ValueError(
            f"catalog row for {source} points at {uri}, whose manifest says it was built from "
            f"{manifest.source_version}; {set_format.hint(source)}"
        )
    return ResolvedSet(
        source=source,
        directory=directory,
        manifest=manifest,
        manifest_sha256=found,
        remote=remote,
        pin=cached.pin if cached is not None else None,
        cache_use=cached.use if cached is not None else None,
    )


def open_shard_sets(
    keys: Sequence[str], options: LoaderOptions
) -> list[ResolvedSet[ShardSetManifest]]:
    """The shard sets of a mixture's sources, each resolved, checked against what the trainer
    asked for (seq_len, tokenizer, expected hashes) and readable by this job."""
    tokenizer_hash = tokenizer_file_hash(options.tokenizer) if options.tokenizer else None
    opened = []
    for key in keys:
        one = resolve_set(
            key,
            SHARD_SETS,
            settings=options.settings,
            cache_dir=options.cache_path,
            seq_len=options.seq_len,
            tokenizer_hash=tokenizer_hash or options.expected_tokenizer_hash,
        )
        check_compatible(
            one.manifest,
            seq_len=options.seq_len,
            tokenizer_hash=tokenizer_hash,
            expected_tokenizer_hash=options.expected_tokenizer_hash,
            expected_schema_fingerprint=options.expected_schema_fingerprint,
        )
        opened.append(check_readable(one, options))
    return opened


def open_text_sets(
    keys: Sequence[str], options: LoaderOptions
) -> list[ResolvedSet[TextSetManifest]]:
    """The text sets of a mixture's sources (to tokenize in the loader), readable by this job."""
    return [
        check_readable(
            resolve_set(key, TEXT_SETS, settings=options.settings, cache_dir=options.cache_path),
            options,
        )
        for key in keys
    ]


def check_readable(resolved: ResolvedSet[M], options: LoaderOptions) -> ResolvedSet[M]:
    """Refuse a set the platform revoked (unless `allow_revoked`) or holding a data namespace
    outside the job's `namespaces`; the set, when it may be read."""
    location, endpoint = location_of(resolved)
    if not options.allow_revoked:
        refuse_revoked(resolved.source, resolved.manifest.set_key, location, endpoint)
    if options.namespaces is not None:
        refuse_namespaces(resolved.source, location, options.namespaces, endpoint)
    return resolved


def _manifest_bytes(directory: Path, set_format: SetFormat[Any]) -> bytes:
    """The bytes of the manifest that completes the set at `directory` (written last)."""
    path = directory / set_format.manifest_name
    if not path.is_file():
        raise ValueError(
            f"{directory} is not a complete {set_format.noun}: {set_format.manifest_name} is "
            f"missing (written last); {set_format.hint('DATASET@vN')}"
        )
    return path.read_bytes()


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
    rebuild = SHARD_SETS.hint(manifest.source_version)
    ours = manifest.layout_fingerprint()
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


def location_of(resolved: ResolvedSet[Any]) -> tuple[str, str | None]:
    """Where a set is published (its remote URI when served from the cache) and the S3
    endpoint reaching it."""
    if resolved.remote is not None:
        return resolved.remote.uri, resolved.remote.s3_endpoint
    return str(resolved.directory), None


def check_same_layout(resolved: Sequence[ResolvedSet[ShardSetManifest]]) -> None:
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
