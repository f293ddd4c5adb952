"""Text sets: a dataset version's curated text, for tokenizing in the loader.

The platform exports a version's final text (after every curation stage, less the documents the
version excludes) as a text set, beside its shard sets (`fm text export DATASET@vN`):

| file | what |
|---|---|
| `shard.NNNNN.mds` | MDS, uncompressed: one sample per document, columns `doc_id`, `text` (`str`) |
| `index.json` | MDS index |
| `fm_text_manifest.json` | `TextSetManifest`, written last: its presence means "complete" |

Documents are stored in doc_id order. Why a file set and not a read of the Iceberg tables: the
loader needs random access to any document by number (an mmap, O(1)), the same per-shard
sha256, node cache and pre-warm as shard sets, and no catalog or warehouse credentials on the
trainer nodes; and the version's exclusions (revocations) are applied once, by the platform
that owns them, instead of re-implemented in every trainer.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from fm_loader.format.manifest import ShardInfo, local_directory
from fm_loader.format.mapped import OFFSET_PAIR, MappedShards
from fm_loader.settings import CatalogLocation, load_loader_settings
from fm_loader.sources.resolve import VERSION_KEY, catalog_rows
from fm_loader.storage.cache import EntryPin, Layout, is_remote, open_cached
from fm_loader.storage.fetch import CacheUse, RemoteShards, remote_manifest_sha256

TEXT_MANIFEST_NAME = "fm_text_manifest.json"
TEXT_FORMAT_VERSION = 1
TEXT_COLUMNS = {"doc_id": "str", "text": "str"}
EXPORT_HINT = "export it with `fm text export {version}`"


@dataclass(frozen=True)
class TextSetManifest:
    """A version's text as stored for the loader; each shard's `samples` counts its documents
    (`tokens` is 0: a text set holds no tokens)."""

    format_version: int
    text_set_key: str  # the version key, e.g. "chat@v2"
    source_version: str
    version_content_hash: str
    pipeline_version: str
    created_at: str  # ISO 8601, UTC
    num_documents: int
    num_bytes: int  # UTF-8 bytes of text
    shards: tuple[ShardInfo, ...]

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> TextSetManifest:
        """Parse and validate; an unknown format version or malformed fields raise."""
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"text-set manifest is not valid JSON: {exc}") from exc
        if not isinstance(obj, dict) or obj.get("format_version") != TEXT_FORMAT_VERSION:
            raise ValueError(
                f"unsupported text-set manifest (format_version "
                f"{obj.get('format_version') if isinstance(obj, dict) else None!r}); this loader "
                f"reads version {TEXT_FORMAT_VERSION}: upgrade fm_loader or export the text again"
            )
        expected = {f.name for f in fields(cls)}
        if set(obj) != expected:
            raise ValueError(
                f"text-set manifest fields {sorted(obj)} differ from {sorted(expected)}"
            )
        shards = tuple(ShardInfo(**s) for s in obj["shards"])
        manifest = cls(**{**obj, "shards": shards})
        if sum(s.samples for s in shards) != manifest.num_documents:
            raise ValueError("text-set manifest num_documents differs from the sum over its shards")
        return manifest


def _describe(data: bytes) -> tuple[str, tuple[ShardInfo, ...], str]:
    manifest = TextSetManifest.from_json(data.decode("utf-8"))
    return (
        manifest.text_set_key,
        manifest.shards,
        EXPORT_HINT.format(version=manifest.source_version),
    )


TEXT_SET = Layout(TEXT_MANIFEST_NAME, _describe)  # how the node cache holds a text set


def read_text_manifest(directory: str | Path) -> tuple[TextSetManifest, str]:
    """The text set's manifest at `directory` and the sha256 of its bytes."""
    path = local_directory(directory) / TEXT_MANIFEST_NAME
    if not path.is_file():
        raise ValueError(
            f"{path.parent} is not a complete text set: {TEXT_MANIFEST_NAME} is missing (written "
            "last); export the version's text with `fm text export DATASET@vN`"
        )
    data = path.read_bytes()
    return TextSetManifest.from_json(data.decode("utf-8")), hashlib.sha256(data).hexdigest()


class TextShards(MappedShards):
    """The documents of one text set, by number (their doc_id order), read in place."""

    def __init__(self, directory: Path, manifest: TextSetManifest, **kwargs: Any) -> None:
        self.manifest = manifest
        super().__init__(
            directory,
            manifest.text_set_key,
            manifest.shards,
            TEXT_COLUMNS,
            rebuild_hint=EXPORT_HINT.format(version=manifest.source_version),
            **kwargs,
        )

    def read_texts(self, indices: list[int]) -> tuple[list[str], list[str]]:
        """(doc ids, texts) of documents `indices`.

        An MDS sample of two `str` columns: their two uint32 sizes, then doc_id, then text.
        """
        doc_ids, texts = [], []
        for index in indices:
            shard, local = self.locate(index)
            mapped = self.maps.get(shard) or self.open_shard(shard)
            begin, _ = OFFSET_PAIR.unpack_from(mapped, 4 * (1 + local))
            id_size, text_size = OFFSET_PAIR.unpack_from(mapped, begin)
            at = begin + 8
            doc_ids.append(mapped[at : at + id_size].decode("utf-8"))
            texts.append(mapped[at + id_size : at + id_size + text_size].decode("utf-8"))
        return doc_ids, texts


@dataclass(frozen=True)
class ResolvedTextSet:
    """A text set located (in place, or complete in the node cache) and its manifest read."""

    source: str
    directory: Path
    manifest: TextSetManifest
    manifest_sha256: str
    remote: RemoteShards | None = None
    pin: EntryPin | None = None
    cache_use: CacheUse | None = None


def resolve_text_set(
    source: str, *, settings: CatalogLocation | None = None, cache_dir: Path | None = None
) -> ResolvedTextSet:
    """A version key's text set (through the catalog's `text_sets`), or a text set directory /
    file:// / s3:// URI; an s3:// set is served from the node cache, like shard sets."""
    if VERSION_KEY.fullmatch(source):
        settings = settings or load_loader_settings()
        rows = catalog_rows(source, settings, "text_sets")
        if not rows:
            raise ValueError(
                f"no text set is registered for {source}: " + EXPORT_HINT.format(version=source)
            )
        row = max(rows, key=lambda r: r["created_at"])  # an export again appends a new row
        uri, digest = str(row["uri"]), str(row["manifest_sha256"])
    elif is_remote(source):
        settings = settings or load_loader_settings()
        uri = source
        digest = remote_manifest_sha256(source, settings.s3_endpoint, TEXT_MANIFEST_NAME)
    else:
        manifest, digest = read_text_manifest(source)
        return ResolvedTextSet(source, local_directory(source), manifest, digest)
    if not is_remote(uri):
        manifest, found = read_text_manifest(uri)
        if found != digest:
            raise ValueError(
                f"the text set of {source} at {uri} has manifest sha256 {found}, the catalog "
                f"registered {digest}: it changed after it was registered; "
                + EXPORT_HINT.format(version=source)
            )
        return ResolvedTextSet(source, local_directory(uri), manifest, digest)
    endpoint = settings.s3_endpoint if settings is not None else None
    cached = open_cached(uri, digest, cache_dir=cache_dir, s3_endpoint=endpoint, layout=TEXT_SET)
    manifest, _ = read_text_manifest(cached.directory)
    remote = RemoteShards(uri, cached.directory, endpoint, TEXT_MANIFEST_NAME)
    return ResolvedTextSet(
        source, cached.directory, manifest, digest, remote, cached.pin, cached.use
    )
