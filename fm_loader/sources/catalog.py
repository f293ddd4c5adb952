"""Where a version's published sets are: a read-only lookup in the catalog's Iceberg tables.

The platform registers each set it publishes as a row of the set format's table (`shard_sets`,
`text_sets` in the platform's namespace): version key, uri, the sha256 of the manifest it wrote,
and for shard sets its key, tokenizer hash and seq_len. Rebuilding a set appends a row under the
same key, so the latest registration of each key is the one served. `published_set` is the one
lookup of a version key for every kind of set; `shard_set_locations` lists several (pre-warm).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fm_loader.format.manifest import SHARD_SETS, local_directory, read_manifest_bytes
from fm_loader.format.set_format import SetFormat
from fm_loader.settings import CatalogLocation, load_loader_settings
from fm_loader.storage.cache import is_remote
from fm_loader.storage.fetch import remote_manifest_sha256

VERSION_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*@v[0-9]+")
SHARD_SET_KEY = re.compile(r"(?P<version>[A-Za-z0-9][A-Za-z0-9_.\-]*@v[0-9]+)/[0-9a-f]{12}-s[0-9]+")
Row = dict[str, Any]


@dataclass(frozen=True)
class Location:
    """Where one registered (or named) set is published, and the manifest hash pinning it."""

    shard_set_key: str  # the set's key (a text set's is its version key)
    uri: str
    manifest_sha256: str


def published_set(
    version_key: str,
    set_format: SetFormat[Any],
    settings: CatalogLocation,
    *,
    seq_len: int | None = None,
    tokenizer_hash: str | None = None,
) -> Location:
    """The one set of `set_format` that `version_key` names: the latest registration of each of
    the version's sets, narrowed by seq_len / tokenizer hash (shard sets; a text set has neither).

    Raises ValueError saying what to do when the version has no such set, when none matches, or
    when several do (listing them, so the trainer can pass seq_len= / tokenizer=).
    """
    latest = _latest_rows(version_key, set_format, catalog_rows(version_key, settings, set_format))
    candidates = [row for row in latest.values() if _matches(row, seq_len, tokenizer_hash)]
    noun, hint = set_format.noun, set_format.hint(version_key)
    available = "; ".join(_describe(r) for r in sorted(latest.values(), key=_describe))
    if not candidates:
        raise ValueError(
            f"no {noun} of {version_key} matches seq_len={seq_len}, "
            f"tokenizer hash={tokenizer_hash}. Available: {available}. Pass a matching "
            f"seq_len= / tokenizer=, or {hint}"
        )
    if len(candidates) > 1:
        raise ValueError(
            f"{version_key} has {len(candidates)} {noun}s matching seq_len={seq_len}, "
            f"tokenizer hash={tokenizer_hash}: {available}. Choose one with seq_len= and/or "
            "tokenizer= (a tokenizer.json path)"
        )
    return _location(candidates[0], version_key)


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
        rows = catalog_rows(version, settings, SHARD_SETS)
        latest = _latest_rows(version, SHARD_SETS, rows)
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
            _location(r, version) for r in sorted(chosen, key=lambda r: str(r["shard_set_key"]))
        ]
    if is_remote(source):
        settings = settings or load_loader_settings()
        digest = remote_manifest_sha256(source, settings.s3_endpoint)
        return [Location(source, source, digest)]
    data = read_manifest_bytes(local_directory(source))
    key = SHARD_SETS.parse(data).set_key
    return [Location(key, source, hashlib.sha256(data).hexdigest())]


def catalog_rows(
    version_key: str, settings: CatalogLocation, set_format: SetFormat[Any]
) -> list[Row]:
    """The rows of the set format's table for one version, read-only; [] when the catalog or
    the table is absent."""
    sqlite_path = settings.catalog_uri.removeprefix("sqlite:///")
    if sqlite_path != settings.catalog_uri and not Path(sqlite_path).exists():
        # SqlCatalog would create an empty database file: a loader must not write.
        return []
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
    from pyiceberg.expressions import EqualTo

    from fm_loader.storage.remote import iceberg_s3_properties

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
        table = catalog.load_table(f"{settings.namespace}.{set_format.catalog_table}")
    except (NoSuchTableError, NoSuchNamespaceError):
        return []
    # mypy reads EqualTo's pydantic fields, not its positional __init__.
    scan = table.scan(row_filter=EqualTo("version_key", version_key))  # type: ignore[call-arg,arg-type]
    rows: list[Row] = scan.to_arrow().to_pylist()
    return rows


def _latest_rows(version_key: str, set_format: SetFormat[Any], rows: list[Row]) -> dict[str, Row]:
    """A version's catalog rows by set key; refuses a version with none."""
    if not rows:
        raise ValueError(
            f"unknown dataset version {version_key}: no {set_format.noun} is registered for it; "
            + set_format.hint(version_key)
        )
    # A rebuilt set appends a new row under the same key: the latest registration wins.
    latest: dict[str, Row] = {}
    for row in sorted(rows, key=lambda r: r["created_at"]):
        latest[str(row.get("shard_set_key", version_key))] = row
    return latest


def _location(row: Row, version_key: str) -> Location:
    key = str(row.get("shard_set_key", version_key))
    return Location(key, str(row["uri"]), str(row["manifest_sha256"]))


def _matches(row: Row, seq_len: int | None, tokenizer_hash: str | None) -> bool:
    """A row without seq_len / tokenizer columns (a text set) matches any."""
    return (seq_len is None or row.get("seq_len", seq_len) == seq_len) and (
        tokenizer_hash is None or row.get("tokenizer_hash", tokenizer_hash) == tokenizer_hash
    )


def _describe(row: Row) -> str:
    if "shard_set_key" not in row:
        return str(row["version_key"])
    return f"{row['shard_set_key']} (seq_len={row['seq_len']}, tokenizer={row['tokenizer_hash']})"
