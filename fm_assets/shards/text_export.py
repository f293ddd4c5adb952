"""Text sets: a version's curated text exported for tokenizing in the loader (`fm text export`).

A version's final text (the stage before tokenization, read at the version's tagged snapshot,
less the documents it excludes) is written in doc_id order as MDS shards of (doc_id, text),
with `fm_text_manifest.json` last, at `texts/<namespaces>/<dataset>/v<N>/` in the object store
(below the data namespaces it holds, like shard sets, for bucket policies), and
registered in the `text_sets` table; `fm_loader.make_dataset(..., tokenize_online=True)` reads
it (`fm_loader.format.text_set`). Exporting a version twice writes the same bytes (same order, same
content) and does no work when its set is already published.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from fm_assets.execution.compute import Progress
from fm_assets.settings import PIPELINE_VERSION, Settings
from fm_assets.shards.build import upload_shard_set
from fm_assets.storage import catalog
from fm_assets.storage.objectstore import open_object_store
from fm_assets.storage.tables import TableSpec, declare
from fm_assets.versions.dataset_version import (
    DatasetVersion,
    namespaces_of,
    parse_version_key,
    require_version,
)
from fm_assets.versions.reader import version_text_documents
from fm_loader.format.manifest import INDEX_NAME, ShardInfo
from fm_loader.format.mds import defer_streaming_packages
from fm_loader.format.text_set import (
    TEXT_COLUMNS,
    TEXT_FORMAT_VERSION,
    TEXT_MANIFEST_NAME,
    TextSetManifest,
)
from fm_loader.sources.provenance import NAMESPACES_NAME, namespaces_json

TEXT_SETS = pa.schema(
    [
        pa.field("version_key", pa.string(), nullable=False),
        pa.field("uri", pa.string(), nullable=False),  # directory holding the text set
        pa.field("manifest_sha256", pa.string(), nullable=False),
        pa.field("num_documents", pa.int64(), nullable=False),
        pa.field("num_bytes", pa.int64(), nullable=False),  # UTF-8 bytes of text
        pa.field("run_id", pa.string(), nullable=True),
        pa.field("created_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
declare(TableSpec("text_sets", TEXT_SETS))


@dataclass(frozen=True)
class TextSetBuild:
    manifest: TextSetManifest
    uri: str
    manifest_sha256: str
    created: bool


def text_set_prefix(version_key: str, namespaces: Sequence[str]) -> str:
    """Where a version's text set lives: below the data namespaces its documents come from."""
    dataset, number = parse_version_key(version_key)
    held = ".".join(sorted(namespaces)) or "none"
    return f"texts/{held}/{dataset}/v{number}"


def write_text_set(
    documents: Iterable[tuple[str, str]],
    out_dir: Path,
    *,
    text_set_key: str,
    version_content_hash: str,
    size_limit_bytes: int = 64 << 20,
) -> TextSetManifest:
    """Write (doc_id, text) pairs as MDS shards into the empty `out_dir`, then the manifest."""
    defer_streaming_packages()  # the format modules alone: not streaming's datasets
    from streaming.base.format.mds.writer import MDSWriter

    writer = MDSWriter(
        columns=TEXT_COLUMNS,
        out=str(out_dir),
        compression=None,  # the loader memory-maps and slices the shards in place
        hashes=["sha256"],
        size_limit=size_limit_bytes,
    )
    count = size = 0
    try:
        for doc_id, text in documents:
            writer.write({"doc_id": doc_id, "text": text})
            count += 1
            size += len(text.encode("utf-8"))
        if not count:
            raise ValueError(f"{text_set_key} has no documents: there is no text to export")
    except BaseException:
        writer.cancel_future_jobs()  # no index.json for a partial set
        raise
    writer.finish()
    index = json.loads((out_dir / INDEX_NAME).read_text())
    manifest = TextSetManifest(
        format_version=TEXT_FORMAT_VERSION,
        text_set_key=text_set_key,
        source_version=text_set_key,
        version_content_hash=version_content_hash,
        pipeline_version=PIPELINE_VERSION,
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        num_documents=count,
        num_bytes=size,
        shards=tuple(
            ShardInfo(
                name=s["raw_data"]["basename"],
                sha256=s["raw_data"]["hashes"]["sha256"],
                bytes=int(s["raw_data"]["bytes"]),
                samples=int(s["samples"]),
                tokens=0,
            )
            for s in index["shards"]
        ),
    )
    (out_dir / TEXT_MANIFEST_NAME).write_text(manifest.to_json())
    return manifest


def version_text(settings: Settings, version: DatasetVersion) -> pa.Table:
    """(doc_id, text) of the version's final text, in doc_id order."""
    docs = version_text_documents(settings, version, ("doc_id", "text"))
    return docs.take(pc.sort_indices(docs, sort_keys=[("doc_id", "ascending")]))


def export_text_set(
    settings: Settings,
    version_key: str,
    *,
    run_id: str | None = None,
    progress: Progress = lambda message: None,
    size_limit_bytes: int = 64 << 20,
) -> TextSetBuild:
    """Publish and register the version's text set (or find it published); see the module."""
    version = require_version(settings, version_key)
    store = open_object_store(settings)
    existing = latest_text_set(settings, version_key)
    namespaces = namespaces_of(settings, version)
    # A set exported already stays where it was written (an older platform laid sets out
    # otherwise); a new one goes below its namespaces.
    prefix = (
        store.key_of(str(existing["uri"]))
        if existing is not None
        else text_set_prefix(version_key, namespaces)
    )
    manifest_key = f"{prefix}/{TEXT_MANIFEST_NAME}"
    if existing is not None and store.exists(manifest_key):
        data = store.read_bytes(manifest_key)
        manifest = TextSetManifest.from_json(data.decode("utf-8"))
        if manifest.version_content_hash == version.content_hash:
            progress(f"text set of {version_key} already exported, nothing to do")
            digest = hashlib.sha256(data).hexdigest()
            return TextSetBuild(manifest, store.uri(prefix), digest, created=False)
    docs = version_text(settings, version)
    progress(f"exporting the text of {docs.num_rows} documents of {version_key}")
    pairs = zip(docs.column("doc_id").to_pylist(), docs.column("text").to_pylist(), strict=True)
    store.delete_file(manifest_key)  # unpublished first: never an old manifest over new shards
    store.delete_dir(prefix)
    with tempfile.TemporaryDirectory(prefix="fm-text-staging-") as staging:
        local = Path(staging) / "set"
        manifest = write_text_set(
            pairs,
            local,
            text_set_key=version_key,
            version_content_hash=version.content_hash,
            size_limit_bytes=size_limit_bytes,
        )
        # What make_dataset(namespaces=...) checks, uploaded before the manifest publishes.
        (local / NAMESPACES_NAME).write_text(namespaces_json(namespaces))
        upload_shard_set(store, local, prefix, TEXT_MANIFEST_NAME)
    digest = hashlib.sha256(store.read_bytes(manifest_key)).hexdigest()
    row = {
        "version_key": version_key,
        "uri": store.uri(prefix),
        "manifest_sha256": digest,  # what readers will fetch, not what we meant to publish
        "num_documents": manifest.num_documents,
        "num_bytes": manifest.num_bytes,
        "run_id": run_id,
        "created_at": dt.datetime.now(dt.UTC),
    }
    catalog.append_rows(settings, "text_sets", pa.Table.from_pylist([row]))
    progress(
        f"text set {store.uri(prefix)}: {manifest.num_documents} documents, "
        f"{manifest.num_bytes / 1e6:,.1f} MB of text in {len(manifest.shards)} shards"
    )
    return TextSetBuild(manifest, store.uri(prefix), digest, created=True)


def latest_text_set(settings: Settings, version_key: str) -> dict[str, object] | None:
    """The version's current `text_sets` row, if it was exported."""
    rows = catalog.read_table(
        settings, "text_sets", catalog.where_equal("version_key", version_key)
    ).to_pylist()
    return max(rows, key=lambda r: r["created_at"]) if rows else None
