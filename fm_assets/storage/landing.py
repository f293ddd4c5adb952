"""The landing zone: immutable, content-addressed batches of input files with a manifest.

Layout in the object store:

    landing/data/<namespace>/<batch_id>/<sha256[:16]>-<name>   the landed bytes, never modified
    landing/batches/<batch_id>/manifest.json      written last: its presence publishes the batch
    landing/published/<ingest ns>-<batch_id>      append-only log the sensor follows

The landed bytes live under their data namespace's prefix, so a bucket policy can keep a role
away from a namespace's data (`deploy/iam/`); manifests hold only metadata. (Batches landed
before this layout keep their files under `landing/batches/<batch_id>/files/`: a manifest names
every file's key.) A batch id derives from the files' content alone, so landing the same files
again finds the existing batch and does no new work.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fm_assets.settings import PIPELINE_VERSION
from fm_assets.storage.generators import Generator
from fm_assets.storage.objectstore import ObjectStore

MANIFEST_FORMAT_VERSION = 1  # a text batch's manifest: the format since the first release
# A batch of another modality records it; format 1 manifests (no `modality`) are text batches.
MODALITY_MANIFEST_FORMAT_VERSION = 2
# A batch claiming a generator (synthetic data) records it; batches without one keep format 1 or 2.
GENERATOR_MANIFEST_FORMAT_VERSION = 3
FORMATS = (
    MANIFEST_FORMAT_VERSION,
    MODALITY_MANIFEST_FORMAT_VERSION,
    GENERATOR_MANIFEST_FORMAT_VERSION,
)
TEXT_MODALITY = "text"
IMAGE_TEXT_MODALITY = "image-text"
MODALITIES = (TEXT_MODALITY, IMAGE_TEXT_MODALITY)
_CHUNK = 8 << 20


@dataclass(frozen=True)
class LandedFile:
    """One file of a batch: its original name, content hash, size and object key."""

    name: str
    sha256: str
    size: int
    key: str


@dataclass(frozen=True)
class BatchManifest:
    """What a landing batch holds and where it came from; immutable once published."""

    format_version: int
    batch_id: str
    source: str
    license: str
    namespace: str
    ingested_at: str  # ISO-8601 UTC
    tool_version: str
    files: tuple[LandedFile, ...]
    modality: str = TEXT_MODALITY  # one of MODALITIES: which pipeline curates the batch
    generator: Generator | None = None  # what produced the batch, if it is synthetic

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> str:
        fields = asdict(self)
        if self.generator is not None:
            fields["generator"] = self.generator.as_dict()
            fields["format_version"] = GENERATOR_MANIFEST_FORMAT_VERSION
            return json.dumps(fields, indent=2, sort_keys=True)
        del fields["generator"]  # batches without one keep the format earlier releases wrote
        if self.modality == TEXT_MODALITY:
            # A text batch's manifest stays byte for byte what earlier releases wrote.
            del fields["modality"]
            fields["format_version"] = MANIFEST_FORMAT_VERSION
        else:
            fields["format_version"] = MODALITY_MANIFEST_FORMAT_VERSION
        return json.dumps(fields, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> BatchManifest:
        """Parse and validate a manifest; anything malformed raises ValueError naming the field.

        The manifest decides which objects a run reads, so a file key outside its batch's
        prefix (below its namespace's, or the `files/` of batches landed before) is refused like
        a wrong type.
        """
        try:
            raw = json.loads(text)
        except (ValueError, RecursionError) as exc:  # bad JSON, bad UTF-8, absurd nesting
            raise ValueError(f"landing manifest is not valid JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise ValueError(f"landing manifest must be a JSON object, got {_json_type(raw)}")
        version = raw.get("format_version")
        if version not in FORMATS:
            raise ValueError(
                f"landing manifest format {version!r} is not supported (this fm reads "
                f"{', '.join(map(str, FORMATS))}); upgrade fm-platform"
            )
        if version == MANIFEST_FORMAT_VERSION:
            if "modality" in raw:
                raise ValueError("landing manifest format 1 has no field 'modality'")
            raw = {**raw, "modality": TEXT_MODALITY}
        generator = None
        if version == GENERATOR_MANIFEST_FORMAT_VERSION:
            generator = Generator.from_mapping(raw.get("generator"), "landing manifest generator")
        elif "generator" in raw:
            raise ValueError(f"landing manifest format {version} has no field 'generator'")
        raw = {**raw, "generator": generator}
        fields = _checked_fields(cls, raw, "landing manifest")
        if fields["modality"] not in MODALITIES:
            raise ValueError(
                f"landing manifest field 'modality' is {fields['modality']!r}; this fm curates "
                f"{', '.join(MODALITIES)}"
            )
        files = raw["files"]
        if not isinstance(files, list):
            raise ValueError(f"landing manifest field 'files' must be a list, got {files!r:.80}")
        batch_id, namespace = str(fields["batch_id"]), str(fields["namespace"])
        prefixes = [f"{data_prefix(namespace, batch_id)}/", f"{_batch_prefix(batch_id)}/files/"]
        if not NAMESPACE_NAME.fullmatch(namespace):  # a name no landing since then accepts
            prefixes = prefixes[1:]
        landed = []
        for number, entry in enumerate(files):
            what = f"landing manifest file {number}"
            if not isinstance(entry, dict):
                raise ValueError(f"{what} must be a JSON object, got {_json_type(entry)}")
            file = LandedFile(**_checked_fields(LandedFile, entry, what))
            if not _SHA256.fullmatch(file.sha256) or file.size < 0:
                raise ValueError(f"{what} has sha256 {file.sha256!r:.80} and size {file.size}")
            rests = [file.key.removeprefix(p) for p in prefixes if file.key.startswith(p)]
            if not rests or not rests[0] or "/" in rests[0] or rests[0].startswith("."):
                raise ValueError(
                    f"{what} has key {file.key!r:.120}, not a file under {prefixes[0]}"
                )
            landed.append(file)
        return cls(**{**fields, "files": tuple(landed)})


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _json_type(value: object) -> str:
    names: dict[type, str] = {dict: "an object", list: "an array", str: "a string"}
    return names.get(type(value), f"{value!r:.80}")


def _checked_fields(cls: type, raw: dict[str, Any], what: str) -> dict[str, Any]:
    """The scalar fields of dataclass `cls` from `raw`: every one present with its type, no
    other key. A non-scalar field (the file list) is passed through for the caller to check."""
    expected = {f.name: str(f.type) for f in dataclasses.fields(cls)}
    missing, unknown = sorted(set(expected) - set(raw)), sorted(set(raw) - set(expected))
    if missing or unknown:
        raise ValueError(f"{what} fields do not match: missing {missing}, unknown {unknown}")
    for name, type_name in expected.items():
        value = raw[name]
        ok = {
            "int": isinstance(value, int) and not isinstance(value, bool),
            "str": isinstance(value, str),
        }.get(type_name, True)
        if not ok:
            raise ValueError(f"{what} field {name!r} must be {type_name}, got {value!r:.80}")
    return dict(raw)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def batch_id_for(file_hashes: Iterable[str]) -> str:
    """The batch id of a set of files: a hash of their sorted content hashes."""
    digest = hashlib.sha256("\n".join(sorted(set(file_hashes))).encode()).hexdigest()
    return f"b-{digest[:20]}"


def _batch_prefix(batch_id: str) -> str:
    return f"landing/batches/{batch_id}"


def data_prefix(namespace: str, batch_id: str) -> str:
    """Where a batch's landed bytes live: below its data namespace's own prefix."""
    return f"landing/data/{namespace}/{batch_id}"


# Lower-case letters, digits and hyphens: a namespace names object-store prefixes and catalog
# entries, and bucket policies match them.
NAMESPACE_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


def read_manifest(store: ObjectStore, batch_id: str) -> BatchManifest:
    key = f"{_batch_prefix(batch_id)}/manifest.json"
    if not store.exists(key):
        raise ValueError(
            f"landing batch {batch_id} does not exist (no {store.uri(key)}); "
            "list batches with `fm status` or land files with `fm land`"
        )
    try:
        return BatchManifest.from_json(store.read_bytes(key))
    except ValueError as exc:
        raise ValueError(
            f"{store.uri(key)} is damaged: {exc}; the landed batch cannot be read (restore the "
            "file from a backup, or land the files again)"
        ) from exc


def manifest_checksum(store: ObjectStore, batch_id: str) -> tuple[str, str, int]:
    """(URI, sha256, size) of a batch's manifest as stored now.

    The manifest has no checksum of its own and a flipped bit in its metadata (a license, a
    source) still parses: the raw stage pins this on its first run, `fm verify` compares.
    """
    key = f"{_batch_prefix(batch_id)}/manifest.json"
    data = store.read_bytes(key)
    return store.uri(key), hashlib.sha256(data).hexdigest(), len(data)


def list_batches(store: ObjectStore) -> list[BatchManifest]:
    """All published batches in publication order."""
    return [read_manifest(store, batch_id) for _, batch_id in published_log(store)]


def published_log(store: ObjectStore, after: str | None = None) -> list[tuple[str, str]]:
    """(log entry, batch id) pairs in publication order, optionally only those after `after`."""
    entries = store.list_dir("landing/published")
    out = []
    for entry in entries:
        if after is not None and entry <= after:
            continue
        _, _, batch_id = entry.partition("-")
        out.append((entry, batch_id))
    return out


def land_files(
    store: ObjectStore,
    paths: Sequence[Path],
    *,
    source: str,
    license: str,
    namespace: str = "cloud",
    modality: str = TEXT_MODALITY,
    generator: Generator | None = None,
    before_publish: Callable[[str], None] | None = None,
) -> tuple[BatchManifest, bool]:
    """Copy `paths` into a new immutable batch of `modality`; return (manifest, created).

    `created` is False when a batch with exactly these files was landed before; landing it
    again with different source, license, namespace, modality or generator is refused rather
    than silently merged. `before_publish(batch_id)` runs once the files are in place and
    before the manifest publishes the batch (a sidecar the batch must never be seen without).
    """
    if modality not in MODALITIES:
        raise ValueError(f"--modality must be one of {', '.join(MODALITIES)}, got {modality!r}")
    if not paths:
        raise ValueError("nothing to land: name at least one file")
    for name, value in (("source", source), ("license", license)):
        if not value or "/" in value:
            raise ValueError(f"--{name} must be a non-empty name without '/', got {value!r}")
    if not NAMESPACE_NAME.fullmatch(namespace):
        raise ValueError(
            f"--namespace must be lower-case letters, digits and hyphens (e.g. cloud, on-device), "
            f"got {namespace!r}"
        )
    resolved = []
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"cannot land {path}: not a readable file")
        resolved.append((path, _sha256_file(path), path.stat().st_size))
    # The same bytes named twice are one file of the batch.
    unique: dict[str, tuple[Path, int]] = {}
    for path, sha, size in resolved:
        unique.setdefault(sha, (path, size))
    batch_id = batch_id_for(unique)
    prefix = _batch_prefix(batch_id)

    if store.exists(f"{prefix}/manifest.json"):
        existing = read_manifest(store, batch_id)
        landed = (existing.source, existing.license, existing.namespace, existing.modality)
        if landed != (source, license, namespace, modality) or existing.generator != generator:
            claimed = existing.generator.model if existing.generator else "none"
            raise ValueError(
                f"these files were landed already as {batch_id} with source={existing.source} "
                f"license={existing.license} namespace={existing.namespace} "
                f"modality={existing.modality} generator={claimed}; a batch's metadata is "
                "immutable"
            )
        if before_publish is not None:
            before_publish(batch_id)
        # A crash between publishing and logging would hide the batch from the sensor.
        if not any(b == batch_id for _, b in published_log(store)):
            _log_publication(store, batch_id)
        return existing, False

    now = dt.datetime.now(dt.UTC)
    files = tuple(
        LandedFile(
            name=path.name,
            sha256=sha,
            size=size,
            key=f"{data_prefix(namespace, batch_id)}/{sha[:16]}-{path.name}",
        )
        for sha, (path, size) in sorted(unique.items(), key=lambda item: item[1][0].name)
    )
    manifest = BatchManifest(
        format_version=MANIFEST_FORMAT_VERSION,
        batch_id=batch_id,
        source=source,
        license=license,
        namespace=namespace,
        ingested_at=now.isoformat(),
        tool_version=PIPELINE_VERSION,
        files=files,
        modality=modality,
        generator=generator,
    )
    sources = {sha: path for sha, (path, _) in unique.items()}
    _publish(store, manifest, sources, before_publish)
    _log_publication(store, batch_id)
    return manifest, True


def _log_publication(store: ObjectStore, batch_id: str) -> None:
    stamp = f"{int(dt.datetime.now(dt.UTC).timestamp() * 1e6):020d}"
    store.write_bytes_atomic(f"landing/published/{stamp}-{batch_id}", b"")


def _publish(
    store: ObjectStore,
    manifest: BatchManifest,
    sources: dict[str, Path],
    before_publish: Callable[[str], None] | None = None,
) -> None:
    """Put every file in place, then write the manifest, which publishes the batch.

    Each file appears whole (an atomic rename locally, one upload on S3). A crash before the
    manifest leaves files no manifest names; landing the same files again rewrites them.
    """
    for landed in manifest.files:
        if store.size(landed.key) == landed.size:
            continue  # a landing that crashed before its manifest copied it already
        store.upload_file(sources[landed.sha256], landed.key)
    if before_publish is not None:
        before_publish(manifest.batch_id)
    store.write_bytes_atomic(
        f"{_batch_prefix(manifest.batch_id)}/manifest.json", manifest.to_json().encode()
    )
