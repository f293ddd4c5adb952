"""The sample kind of pair sets: image-text pairs (`fm_loader.format.pair_set`).

A sample is one pair: the image's stored bytes, the caption's tokens, its doc id and aspect
bucket. A block of pairs is built in the process that serves the batch (a loader worker, when
there are workers): captions padded to the set's `seq_len` with an attention mask, and with
`image_size` set, the images decoded there (Pillow, JPEG decoded at reduced scale when much
larger than the target) and fitted to the batch's bucket shape (`bucket_shape`), so no image is
decoded on the trainer's thread. The stored bytes travel as a padded uint8 array (a worker's
batch slot holds arrays), and become a list of `bytes` per batch (`image`) for the trainer.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from fm_loader.format.mapped import MappedShards, Refetch
from fm_loader.format.pair_set import PairSet, PairSetManifest
from fm_loader.samples.kind import Arrays, Batch, Field, Sample

_ARRAYS = (
    "input_ids",
    "attention_mask",
    "num_tokens",
    "image_bytes",
    "image_sizes",
    "bucket",
    "width",
    "height",
    "sample_index",
    "source",
)


def bucket_shape(ratio: float, image_size: int) -> tuple[int, int]:
    """(width, height) of a bucket's images decoded with `image_size` on the longer side, both
    rounded to a multiple of 8 (what patch-based image encoders tile by)."""
    width = float(image_size) if ratio >= 1 else image_size * ratio
    height = image_size / ratio if ratio >= 1 else float(image_size)
    return max(8, round(width / 8) * 8), max(8, round(height / 8) * 8)


def decode_fitted(data: bytes, width: int, height: int) -> npt.NDArray[np.uint8]:
    """An image's bytes decoded to RGB, center-cropped to width:height and resized to it, as a
    [3, height, width] uint8 array."""
    from PIL import Image, ImageOps

    image = Image.open(io.BytesIO(data))
    # A JPEG several times larger than needed decodes at 1/2, 1/4 or 1/8 scale: a fraction of
    # the work, and the box filter below sees enough pixels either way.
    image.draft("RGB", (width, height))
    fitted = ImageOps.fit(image.convert("RGB"), (width, height), Image.Resampling.BILINEAR)
    return np.asarray(fitted, dtype=np.uint8).transpose(2, 0, 1)


@dataclass(frozen=True)
class PairBlock:
    """A block of pairs as training arrays (and the doc ids beside them)."""

    arrays: Arrays
    doc_ids: list[str]

    def __len__(self) -> int:
        return len(self.doc_ids)

    def sample(self, i: int) -> Sample:
        a = self.arrays
        n = int(a["num_tokens"][i])
        sample: Sample = {
            "image": bytes(a["image_bytes"][i, : int(a["image_sizes"][i])]),
            "input_ids": torch.from_numpy(a["input_ids"][i, :n].copy()),
            "doc_id": self.doc_ids[i],
            "bucket": int(a["bucket"][i]),
            "width": int(a["width"][i]),
            "height": int(a["height"][i]),
            "sample_index": int(a["sample_index"][i]),
            "source": int(a["source"][i]),
            "num_tokens": n,
        }
        if "pixel_values" in a:
            sample["pixel_values"] = torch.from_numpy(a["pixel_values"][i].copy())
        return sample

    def batch_arrays(self) -> Batch:
        return {**self.arrays, "doc_id": self.doc_ids}

    def batch(self) -> Batch:
        return with_images(
            {
                k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
                for k, v in self.batch_arrays().items()
            }
        )


def with_images(batch: Batch) -> Batch:
    """`batch` with `image`: the stored bytes of each image, cut from the padded array."""
    data, sizes = batch["image_bytes"], batch["image_sizes"]
    rows = data.numpy() if isinstance(data, torch.Tensor) else np.asarray(data)
    batch["image"] = [bytes(rows[i, : int(n)]) for i, n in enumerate(sizes.tolist())]
    return batch


@dataclass(frozen=True)
class ImageTextSamples:
    """Pairs of a pair set: captions of up to `seq_len` tokens, images of up to
    `max_image_bytes`; `image_size` (longer side) decodes them in the serving process."""

    seq_len: int
    pad_token_id: int
    max_image_bytes: int
    ratios: tuple[float, ...]  # of the set's buckets, by bucket index
    image_size: int | None = None
    name: str = "image_text"

    def open(self, directory: Path, manifest: Any, remote: Refetch | None) -> MappedShards:
        return PairSet(directory, manifest, remote=remote)

    def read(
        self,
        sets: Sequence[MappedShards],
        sources: npt.NDArray[np.intp],
        ids: npt.NDArray[np.int64],
        out: Arrays | None = None,
    ) -> PairBlock:
        """Pairs `ids[i]` of `sets[sources[i]]`, built into arrays (into `out` when given)."""
        n = len(ids)
        arrays = out if out is not None else self._empty(n)
        arrays = {k: v[:n] for k, v in arrays.items()}
        doc_ids: list[str] = [""] * n
        arrays["input_ids"].fill(self.pad_token_id)
        arrays["attention_mask"].fill(False)
        arrays["sample_index"][:] = ids
        arrays["source"][:] = sources
        for s, shards in enumerate(sets):
            rows = np.flatnonzero(sources == s)
            if rows.size == 0:
                continue
            if not isinstance(shards, PairSet):
                raise TypeError(f"source {s} is a {type(shards).__name__}, not a pair set")
            raw = shards.read_raw(ids[rows])
            for row, image, tokens, doc_id, geometry in zip(
                rows.tolist(), raw.images, raw.input_ids, raw.doc_ids, raw.geometry, strict=True
            ):
                self._fill(arrays, row, image, tokens, geometry, shards, int(ids[row]))
                doc_ids[row] = doc_id
        if self.image_size is not None:
            self._decode(arrays, n)
        return PairBlock(arrays, doc_ids)

    def _fill(
        self,
        arrays: Arrays,
        row: int,
        image: bytes,
        tokens: npt.NDArray[Any],
        geometry: npt.NDArray[np.int32],
        shards: PairSet,
        index: int,
    ) -> None:
        count = min(len(tokens), self.seq_len)
        if len(image) > self.max_image_bytes:
            raise ValueError(
                f"{shards.where(index)}: a {len(image)}-byte image, over the set's "
                f"max_image_bytes {self.max_image_bytes}; the set is inconsistent: rebuild it"
            )
        arrays["input_ids"][row, :count] = tokens[:count]
        arrays["attention_mask"][row, :count] = True
        arrays["num_tokens"][row] = count
        arrays["image_bytes"][row, : len(image)] = np.frombuffer(image, np.uint8)
        arrays["image_sizes"][row] = len(image)
        arrays["width"][row], arrays["height"][row], arrays["bucket"][row] = geometry.tolist()

    def _decode(self, arrays: Arrays, n: int) -> None:
        buckets = set(arrays["bucket"][:n].tolist())
        if len(buckets) > 1:
            raise ValueError(
                f"a batch holds images of aspect buckets {sorted(buckets)}: decoding fits one "
                "bucket's shape; batches of a pair set come from one bucket (make_loader)"
            )
        if not n:
            return
        width, height = bucket_shape(self.ratios[buckets.pop()], int(self.image_size or 0))
        # Contiguous from the field's start: a worker's slot holds [n, 3, height, width] there.
        room = arrays["pixel_values"].reshape(-1)
        pixels = room[: n * 3 * height * width].reshape(n, 3, height, width)
        for row in range(n):
            size = int(arrays["image_sizes"][row])
            data = arrays["image_bytes"][row, :size].tobytes()
            pixels[row] = decode_fitted(data, width, height)
        arrays["pixel_values"] = pixels

    def _empty(self, n: int) -> Arrays:
        return {
            name: np.zeros(field.max_shape, dtype=field.dtype)
            for name, field in self.slot_fields(n).items()
        }

    def slot_fields(self, batch_size: int, extra: tuple[str, ...] = ()) -> dict[str, Field]:
        """The arrays of a batch at their largest: captions of seq_len tokens, every image at
        the set's largest size, decoded images square at image_size."""
        fields = {
            "input_ids": Field("int64", (batch_size, self.seq_len)),
            "attention_mask": Field("bool", (batch_size, self.seq_len)),
            "num_tokens": Field("int64", (batch_size,)),
            "image_bytes": Field("uint8", (batch_size, self.max_image_bytes)),
            "image_sizes": Field("int64", (batch_size,)),
            "bucket": Field("int64", (batch_size,)),
            "width": Field("int64", (batch_size,)),
            "height": Field("int64", (batch_size,)),
            "sample_index": Field("int64", (batch_size,)),
            "source": Field("int64", (batch_size,)),
        }
        if self.image_size is not None:
            side = bucket_shape(1.0, self.image_size)[0] + 8
            fields["pixel_values"] = Field("uint8", (batch_size, 3, side, side))
        fields.update({name: Field("int64", (batch_size,)) for name in extra})
        return fields

    def collate(self, samples: Sequence[Sample]) -> Batch:
        """Samples as one batch, the layout `batch()` gives."""
        if not samples:
            raise ValueError("cannot collate an empty batch")
        n = len(samples)
        out: Batch = {
            "input_ids": torch.full((n, self.seq_len), self.pad_token_id, dtype=torch.int64),
            "attention_mask": torch.zeros((n, self.seq_len), dtype=torch.bool),
        }
        for i, s in enumerate(samples):
            out["input_ids"][i, : s["num_tokens"]] = s["input_ids"]
            out["attention_mask"][i, : s["num_tokens"]] = True
        for key in ("num_tokens", "bucket", "width", "height", "sample_index", "source"):
            out[key] = torch.tensor([s[key] for s in samples], dtype=torch.int64)
        out["image"] = [s["image"] for s in samples]
        out["doc_id"] = [s["doc_id"] for s in samples]
        if "pixel_values" in samples[0]:
            out["pixel_values"] = torch.stack([s["pixel_values"] for s in samples])
        return out


def for_manifest(manifest: PairSetManifest) -> ImageTextSamples:
    """The kind of a pair set's samples (`fm_loader.samples.kind.sample_kind`)."""
    ratios = [1.0] * (max((b.index for b in manifest.buckets), default=0) + 1)
    for bucket in manifest.buckets:
        ratios[bucket.index] = bucket.ratio
    return ImageTextSamples(
        manifest.seq_len, manifest.pad_token_id, max(manifest.max_image_bytes, 1), tuple(ratios)
    )
