"""Image-text shard sets: the manifest (format 2 of `fm_manifest.json`), the MDS columns, and
reading samples in place.

A pair set is a shard set whose samples are image-text pairs, one pair per sample (no packing):

| column | encoding | content |
|---|---|---|
| `doc_id` | `str` | the pair's 64-hex doc id |
| `geometry` | `ndarray:int32:3` | (width, height, aspect bucket index) of the stored image |
| `image` | `bytes` | the image as the platform stored it (`image_format`: jpeg, webp, png) |
| `input_ids` | `ndarray:{uint16,uint32}` | the caption's tokens (EOS included), at most `seq_len` |

Samples are ordered by aspect bucket: bucket `buckets[i]` holds the samples
`[first, first + samples)`, shuffled inside it by a seed from the version's content hash. The
manifest's `seq_len` is the most caption tokens a sample holds (longer captions are cut), and
`packing_efficiency` is 1 (nothing is packed).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fm_loader.format.manifest import TOKEN_DTYPES, ShardInfo, ShardSetManifest, build_dataclass
from fm_loader.format.mapped import OFFSET_PAIR, MappedShards, Refetch

PAIR_MANIFEST_FORMAT_VERSION = 2
IMAGE_TEXT_KIND = "image_text"
IMAGE_FORMATS = ("jpeg", "webp", "png")
REBUILD_HINT = "rebuild it with `fm shards build {version} --tokenizer PATH --seq-len {seq_len}`"
_SIZES = np.dtype("<u4")


def pair_columns(token_dtype: str) -> dict[str, str]:
    """The MDS column -> encoding mapping of a pair set: the on-disk contract."""
    if token_dtype not in TOKEN_DTYPES:
        raise ValueError(f"token dtype must be one of {TOKEN_DTYPES}, got {token_dtype!r}")
    return {
        "doc_id": "str",
        "geometry": "ndarray:int32:3",
        "image": "bytes",
        "input_ids": f"ndarray:{token_dtype}",
    }


def pair_schema_fingerprint(token_dtype: str) -> str:
    """sha256 over the canonical JSON of the pair columns and the manifest format version."""
    canonical = json.dumps(
        {"format_version": PAIR_MANIFEST_FORMAT_VERSION, "columns": pair_columns(token_dtype)},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class BucketInfo:
    """One aspect bucket of a pair set: its samples are [first, first + samples)."""

    index: int
    name: str  # "width:height", e.g. "16:9"
    ratio: float  # width / height
    first: int
    samples: int


@dataclass(frozen=True)
class PairSetManifest(ShardSetManifest):
    """A shard set of image-text pairs: the shard-set fields (`seq_len`: the most caption
    tokens; `num_tokens`: caption tokens) and its images' format and aspect buckets."""

    image_format: str
    max_side: int  # the longer side of every stored image is at most this (0: not resized)
    max_image_bytes: int  # the largest stored image: what a batch slot must hold
    buckets: tuple[BucketInfo, ...]

    @property
    def sample_kind(self) -> str:
        return IMAGE_TEXT_KIND

    def layout_fingerprint(self) -> str:
        return pair_schema_fingerprint(self.token_dtype)

    def columns(self) -> dict[str, str]:
        return pair_columns(self.token_dtype)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> PairSetManifest:
        """Parse and validate a pair-set manifest; malformed fields raise ValueError."""
        try:
            obj = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ValueError(f"manifest is not valid JSON: {exc}") from exc
        if not isinstance(obj, dict) or obj.get("format_version") != PAIR_MANIFEST_FORMAT_VERSION:
            raise ValueError(
                f"not a pair-set manifest (format_version {PAIR_MANIFEST_FORMAT_VERSION})"
            )
        for name in ("shards", "buckets"):
            if not isinstance(obj.get(name), list):
                raise ValueError(f"manifest field {name!r} must be a list")
        fields_ = {
            **obj,
            "shards": tuple(build_dataclass(ShardInfo, s, "shard") for s in obj["shards"]),
            "buckets": tuple(build_dataclass(BucketInfo, b, "bucket") for b in obj["buckets"]),
        }
        manifest = build_dataclass(cls, fields_, "manifest")
        manifest.check_consistency()
        manifest.check_buckets()
        return manifest

    def check_buckets(self) -> None:
        if self.image_format not in IMAGE_FORMATS:
            raise ValueError(f"manifest image_format {self.image_format!r} not in {IMAGE_FORMATS}")
        at = 0
        for bucket in self.buckets:
            if bucket.first != at or bucket.samples < 0:
                raise ValueError(
                    f"manifest bucket {bucket.name} covers [{bucket.first}, "
                    f"{bucket.first + bucket.samples}), expected to start at {at}"
                )
            at += bucket.samples
        if at != self.num_samples:
            raise ValueError(f"manifest buckets hold {at} samples, the set {self.num_samples}")


@dataclass(frozen=True)
class RawPairs:
    """Samples read in place: the stored images, caption tokens, doc ids and geometry."""

    images: list[bytes]
    input_ids: list[npt.NDArray[Any]]
    doc_ids: list[str]
    geometry: npt.NDArray[np.int32]  # [n, 3]: width, height, bucket


class PairSet(MappedShards):
    """The shards of one pair set: index.json checked against the manifest at construction."""

    def __init__(
        self, directory: Path, manifest: PairSetManifest, *, remote: Refetch | None = None
    ) -> None:
        self.manifest = manifest
        super().__init__(
            directory,
            manifest.shard_set_key,
            manifest.shards,
            pair_columns(manifest.token_dtype),
            rebuild_hint=REBUILD_HINT.format(
                version=manifest.source_version, seq_len=manifest.seq_len
            ),
            remote=remote,
        )

    def read_raw(self, indices: npt.NDArray[np.int64]) -> RawPairs:
        """The samples at `indices`, read in place from the memory-mapped shards.

        MDS lays a sample out as the sizes of its variable columns (doc_id, image, input_ids:
        uint32 each), then every column in name order: doc_id, geometry (12 bytes), image, and
        input_ids (a 1-D ndarray: one shape byte, its length, the values).
        """
        if len(indices) and (indices.min() < 0 or indices.max() >= len(self)):
            raise IndexError(f"sample indices out of range [0, {len(self)})")
        dtype = np.dtype(self.manifest.token_dtype)
        images: list[bytes] = []
        tokens: list[npt.NDArray[Any]] = []
        doc_ids: list[str] = []
        geometry = np.empty((len(indices), 3), dtype=np.int32)
        shards = np.searchsorted(self.bounds, indices, side="right") - 1
        for row, (index, shard) in enumerate(zip(indices.tolist(), shards.tolist(), strict=True)):
            mapped = self.maps.get(shard) or self.open_shard(shard)
            begin, _ = OFFSET_PAIR.unpack_from(mapped, 4 * (1 + index - int(self.bounds[shard])))
            id_size, image_size, ids_size = np.frombuffer(mapped, _SIZES, count=3, offset=begin)
            at = begin + 12
            doc_ids.append(mapped[at : at + id_size].decode("utf-8"))
            at += int(id_size)
            geometry[row] = np.frombuffer(mapped, np.int32, count=3, offset=at)
            at += 12
            images.append(mapped[at : at + image_size])
            at += int(image_size)
            tokens.append(_ndarray_1d(mapped, at, int(ids_size), dtype, self.where(index)))
        return RawPairs(images, tokens, doc_ids, geometry)


def _ndarray_1d(mapped: Any, at: int, size: int, dtype: np.dtype[Any], where: str) -> Any:
    """MDS's dynamic-shape ndarray, one dimension: a header byte (ndim << 2 | the shape's
    dtype code), the length, then the values."""
    header = mapped[at]
    if header >> 2 != 1:
        raise ValueError(f"{where}: input_ids is not a 1-D array; the set is not a pair set")
    skip = 1 + (1 << (header & 3))
    return np.frombuffer(mapped, dtype, count=(size - skip) // dtype.itemsize, offset=at + skip)
