"""What a shard set's directory says about who read it and whether it may still be read.

Two small JSON objects live beside a shard set's `fm_manifest.json`, so the loader's light install
(no catalog writes, no platform) can keep them:

    fm_revoked.json          written by the platform when a revocation covers the set: the loader
                             refuses the set unless the trainer passes `allow_revoked=True`
    fm_runs/<run_id>.json    written by rank 0 of a training run naming itself (`run_id=`): which
                             sets it opened and, at each checkpoint, the stream position consumed
    fm_namespaces.json       written with the set: the data namespaces its documents came from;
                             `make_dataset(namespaces=...)` refuses a set holding any other

The platform reads both (`fm lineage run`, `fm lineage doc`, `fm revoke`).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import pyarrow.fs as pafs

from fm_loader.format.manifest import ShardSetManifest
from fm_loader.storage.remote import filesystem_for

REVOCATION_NAME = "fm_revoked.json"
NAMESPACES_NAME = "fm_namespaces.json"
RUNS_DIR = "fm_runs"
PROVENANCE_FORMAT_VERSION = 1
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


@dataclass(frozen=True)
class Revocation:
    """Why a shard set may no longer be read for training, and what replaces it."""

    format_version: int
    revocation_id: str
    reason: str
    revoked_by: str
    revoked_at: str  # ISO 8601, UTC
    replacement: str | None  # the shard set key built without the revoked documents

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Revocation:
        revocation: Revocation = _build(cls, json.loads(text), REVOCATION_NAME)
        return revocation


@dataclass(frozen=True)
class RunRecord:
    """One training run's read of one shard set, as its rank 0 last checkpointed it."""

    format_version: int
    run_id: str
    shard_set_key: str
    source_version: str
    manifest_sha256: str
    sources: tuple[str, ...]  # every source of the run's mixture, in mixture order
    world_size: int
    seed: int
    epoch: int
    position: int  # global stream position (samples of the whole mixture) consumed in `epoch`
    source_counts: tuple[int, ...]  # samples consumed from each source at `position`
    recorded_at: str  # ISO 8601, UTC

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunRecord:
        obj = json.loads(text)
        if isinstance(obj, dict):
            obj = obj | {k: tuple(obj[k]) for k in ("sources", "source_counts") if k in obj}
        record: RunRecord = _build(cls, obj, "run record")
        return record


def _build(cls: type[Any], obj: Any, what: str) -> Any:
    """Build a frozen record, refusing other format versions and unknown or missing fields."""
    if not isinstance(obj, dict):
        raise ValueError(f"{what} is not a JSON object")
    version = obj.get("format_version")
    if version != PROVENANCE_FORMAT_VERSION:
        raise ValueError(
            f"{what} has format_version {version!r}; this loader reads version "
            f"{PROVENANCE_FORMAT_VERSION}: upgrade fm_loader"
        )
    names = {f.name for f in fields(cls)}
    unknown, missing = sorted(set(obj) - names), sorted(names - set(obj))
    if unknown or missing:
        raise ValueError(f"{what} has unknown fields {unknown} and lacks fields {missing}")
    return cls(**obj)


def _read_text(location: str, name: str, s3_endpoint: str | None) -> str | None:
    fs, path = filesystem_for(location, s3_endpoint)
    target = f"{path.rstrip('/')}/{name}"
    if fs.get_file_info(target).type == pafs.FileType.NotFound:
        return None
    with fs.open_input_stream(target, compression=None) as f:
        data: bytes = f.read()
    return data.decode("utf-8")


def _write_text(location: str, name: str, text: str, s3_endpoint: str | None) -> None:
    fs, path = filesystem_for(location, s3_endpoint)
    target = f"{path.rstrip('/')}/{name}"
    fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
    # One PUT on S3; a local reader may see a short file for an instant, which is harmless for
    # a record that is rewritten at every checkpoint and read only by audits.
    with fs.open_output_stream(target, compression=None) as f:
        f.write(text.encode("utf-8"))


def read_revocation(location: str, s3_endpoint: str | None = None) -> Revocation | None:
    """The revocation marker of the shard set at `location` (directory or URI), or None."""
    text = _read_text(location, REVOCATION_NAME, s3_endpoint)
    return None if text is None else Revocation.from_json(text)


def write_revocation(location: str, revocation: Revocation, s3_endpoint: str | None) -> None:
    """Mark the shard set at `location` as revoked (the platform calls this)."""
    _write_text(location, REVOCATION_NAME, revocation.to_json(), s3_endpoint)


def namespaces_json(namespaces: Iterable[str]) -> str:
    """The `fm_namespaces.json` text for a shard set holding `namespaces`."""
    body = {"format_version": PROVENANCE_FORMAT_VERSION, "namespaces": sorted(set(namespaces))}
    return json.dumps(body, sort_keys=True)


def read_namespaces(location: str, s3_endpoint: str | None = None) -> tuple[str, ...] | None:
    """The namespaces recorded beside the shard set at `location`, or None if none were."""
    text = _read_text(location, NAMESPACES_NAME, s3_endpoint)
    if text is None:
        return None
    obj = json.loads(text)
    if not isinstance(obj, dict) or obj.get("format_version") != PROVENANCE_FORMAT_VERSION:
        raise ValueError(
            f"{location}/{NAMESPACES_NAME} is not a version {PROVENANCE_FORMAT_VERSION} "
            "namespace record: upgrade fm_loader"
        )
    return tuple(str(n) for n in obj["namespaces"])


def refuse_namespaces(
    source: str, location: str, allowed: Collection[str], s3_endpoint: str | None
) -> None:
    """Raise unless every namespace of the shard set at `location` is in `allowed`."""
    held = read_namespaces(location, s3_endpoint)
    if held is None:
        raise ValueError(
            f"{source} records no data namespaces (built before they were recorded), so it "
            f"cannot be checked against namespaces={sorted(allowed)}: rebuild it with "
            "`fm shards build`, or leave namespaces= out"
        )
    other = sorted(set(held) - set(allowed))
    if other:
        raise ValueError(
            f"{source} holds data from namespaces {other}, which this job may not read "
            f"(namespaces={sorted(allowed)}); train on a version cut from allowed batches only"
        )


def refuse_revoked(source: str, shard_set_key: str, location: str, s3_endpoint: str | None) -> None:
    """Raise if the platform revoked the shard set at `location`, naming the reason and the
    replacement to train on."""
    revocation = read_revocation(location, s3_endpoint)
    if revocation is None:
        return
    if revocation.replacement:
        version = revocation.replacement.split("/", 1)[0]
        instead = f"train on its replacement {version} (shard set {revocation.replacement})"
    else:
        instead = "no replacement was built (every document was revoked)"
    raise ValueError(
        f"{source} (shard set {shard_set_key}) is revoked: {revocation.reason} "
        f"({revocation.revocation_id}, by {revocation.revoked_by} at {revocation.revoked_at}); "
        f"{instead}, or pass allow_revoked=True to read it for an audit"
    )


class RunRegistry:
    """Rank 0's writer of one training run's records, one beside each shard set it reads."""

    def __init__(
        self,
        run_id: str,
        manifests: Sequence[tuple[ShardSetManifest, str]],  # (manifest, its sha256)
        locations: Sequence[tuple[str, str | None]],  # (location, S3 endpoint) of each set
        sources: Sequence[str],
    ) -> None:
        self.run_id = check_run_id(run_id)
        self.manifests, self.locations, self.sources = list(manifests), list(locations), sources

    def record(
        self, world_size: int, seed: int, epoch: int, position: int, counts: Sequence[int]
    ) -> None:
        """Write the run's position (global samples consumed in `epoch`) beside every set."""
        now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        for (manifest, digest), (location, endpoint) in zip(
            self.manifests, self.locations, strict=True
        ):
            record = RunRecord(
                format_version=PROVENANCE_FORMAT_VERSION,
                run_id=self.run_id,
                shard_set_key=manifest.shard_set_key,
                source_version=manifest.source_version,
                manifest_sha256=digest,
                sources=tuple(self.sources),
                world_size=world_size,
                seed=seed,
                epoch=epoch,
                position=position,
                source_counts=tuple(int(c) for c in counts),
                recorded_at=now,
            )
            write_run_record(location, record, endpoint)


def check_run_id(run_id: str) -> str:
    """`run_id` if it is a safe object name; else a ValueError saying what is allowed."""
    if not RUN_ID.match(run_id):
        raise ValueError(
            f"run_id {run_id!r} must be 1-128 characters of letters, digits, '_', '.', ':' or "
            "'-', starting with a letter or digit"
        )
    return run_id


def write_run_record(location: str, record: RunRecord, s3_endpoint: str | None) -> None:
    """Write (or overwrite with a later position) a run's record beside its shard set."""
    name = f"{RUNS_DIR}/{check_run_id(record.run_id)}.json"
    _write_text(location, name, record.to_json(), s3_endpoint)


def read_run_record(location: str, run_id: str, s3_endpoint: str | None = None) -> RunRecord | None:
    """The record of run `run_id` beside the shard set at `location`, or None."""
    text = _read_text(location, f"{RUNS_DIR}/{check_run_id(run_id)}.json", s3_endpoint)
    return None if text is None else RunRecord.from_json(text)


def read_run_records(location: str, s3_endpoint: str | None = None) -> list[RunRecord]:
    """Every run recorded beside the shard set at `location`, by run id."""
    fs, path = filesystem_for(location, s3_endpoint)
    selector = pafs.FileSelector(f"{path.rstrip('/')}/{RUNS_DIR}", allow_not_found=True)
    records = []
    for info in sorted(fs.get_file_info(selector), key=lambda i: i.base_name):
        if info.type == pafs.FileType.File and info.base_name.endswith(".json"):
            text = _read_text(location, f"{RUNS_DIR}/{info.base_name}", s3_endpoint)
            if text is not None:
                records.append(RunRecord.from_json(text))
    return records
