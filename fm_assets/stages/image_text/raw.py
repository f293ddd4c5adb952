"""raw_pairs: read landed WebDataset tars and Parquet files into content-addressed pairs.

The exact-dedup machinery of the text spine runs unchanged (`execution/exact_dedup.py`): `scan`
lists each pair's content hash, the runner decides duplicates across the batch and its data
namespace, `read` builds the rows. Files are read whole (a tar or Parquet part is one task).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import BinaryIO, ClassVar, cast

import pyarrow as pa

from fm_assets.formats.image_text import (
    PARQUET,
    PairItem,
    PairRecord,
    container_format,
    read_image_parquet,
    read_webdataset,
)
from fm_assets.formats.records import UnreadableRecord
from fm_assets.stages.raw import CANDIDATES, PartScan, RawStage, part_reject, record_id_for
from fm_assets.storage.generators import Generator, generator_columns
from fm_assets.storage.image_text_schemas import RAW_PAIRS
from fm_assets.storage.objectstore import filesystem_for


def pair_id(image: bytes, caption: str) -> str:
    """A pair's content address: the image's bytes and the caption's, together."""
    digest = hashlib.sha256(b"fm-image-text-v1\x00")
    digest.update(hashlib.sha256(image).digest())
    digest.update(caption.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


@dataclass(frozen=True)
class RawPairsStage(RawStage):
    """Parsed, content-addressed image-text pairs; exact duplicates quarantined.

    Every sample of a landed tar or Parquet file becomes a pair row or a quarantine row; a pair
    whose image bytes and caption equal a pair already kept (in this batch or by another batch
    of the namespace) is quarantined as `exact_duplicate`, naming the pair that was kept.
    """

    name: ClassVar[str] = "raw_pairs"
    version: ClassVar[str] = "1"
    output_schema: ClassVar[pa.Schema] = RAW_PAIRS
    splits_large_files: ClassVar[bool] = False

    def _scan_part(self, part: dict[str, object]) -> PartScan:
        doc_ids: list[str] = []
        items: list[int] = []
        count = 0
        for item in self._pairs(part):
            count = item.index + 1
            if isinstance(item, PairRecord):
                doc_ids.append(pair_id(item.image, item.caption))
                items.append(item.index)
        candidates = pa.table(
            {"doc_id": doc_ids, "part": [part["part"]] * len(items), "item": items},
            schema=CANDIDATES,
        )
        return PartScan(int(part["part"]), count, 0, candidates)  # type: ignore[call-overload]

    def _read_part(
        self, part: dict[str, object], duplicates: Mapping[tuple[int, int], str]
    ) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        rows: list[dict[str, object]] = []
        rejects: list[dict[str, object]] = []
        for item in self._pairs(part):
            record_id = record_id_for(str(part["file_sha256"]), item.index)
            if isinstance(item, UnreadableRecord):
                problem = (item.rule, item.reason)
                rejects.append(part_reject(part, record_id, None, item.raw_sha256, *problem))
                continue
            doc_id = pair_id(item.image, item.caption)
            image_sha = hashlib.sha256(item.image).hexdigest()
            original = duplicates.get((int(part["part"]), item.index))  # type: ignore[call-overload]
            if original is not None:
                problem = ("exact_duplicate", f"same image bytes and caption as {original}")
                rejects.append(part_reject(part, record_id, doc_id, image_sha, *problem))
                continue
            rows.append(_pair_row(part, record_id, doc_id, image_sha, item))
        return rows, rejects

    def _pairs(self, part: dict[str, object]) -> Iterator[PairItem]:
        fs, path = filesystem_for(str(part["file_uri"]), self.s3_endpoint)
        with fs.open_input_file(path) as stream:
            head = stream.read(64 * 1024)
            stream.seek(0)
            if container_format(head) == PARQUET:
                yield from read_image_parquet(stream, self.max_document_bytes)
            else:
                yield from read_webdataset(cast(BinaryIO, stream), self.max_document_bytes)


def _pair_row(
    part: dict[str, object], record_id: str, doc_id: str, image_sha: str, item: PairRecord
) -> dict[str, object]:
    return {
        "doc_id": doc_id,
        "raw_sha256": image_sha,
        "batch_id": part["batch_id"],
        "record_id": record_id,
        "source_file": part["file_name"],
        "source": part["source"],
        "license": part["license"],
        "namespace": part["namespace"],
        "url": item.url,
        "lang_hint": None,
        "external_id": item.key,
        # A synthetic image-text batch's generator, from its manifest (the same for each pair).
        **generator_columns(
            Generator.from_json(str(part["generator"])) if part.get("generator") else None
        ),
        "text": item.caption,
        "image_member": item.image_name,
        "record_offset": item.offset,
        "record_line": item.row,
        "image_extension": item.image_extension,
        "metadata_json": item.metadata_json,
        "raw_size": len(item.image),
        "raw_content": item.image,
    }
