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
from fm_loader.format.set_format import SetFormat

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

    @property
    def set_key(self) -> str:
        return self.text_set_key

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


def _parse(data: bytes) -> TextSetManifest:
    return TextSetManifest.from_json(data.decode("utf-8"))


TEXT_SETS: SetFormat[TextSetManifest] = SetFormat(
    noun="text set",
    manifest_name=TEXT_MANIFEST_NAME,
    catalog_table="text_sets",
    parse=_parse,
    how_to_build=EXPORT_HINT,
)


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
