"""Our side: the decode stage's per-image work, timed two ways on the same bytes in memory.

- the stage: `DecodeStage().process` on a `raw_pairs` table of the images (decode, validate,
  EXIF, RGB, resize + re-encode, pixel sha256, pHash, and the Arrow columns), all-in;
- the functions: the same curation calls in a loop, each part timed on its own, to say where
  the time goes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pyarrow as pa

from bench.harness import timed
from fm_assets.curation.images.decode import DecodedImage, decode_image
from fm_assets.curation.images.hashing import phash, pixel_hash
from fm_assets.curation.images.resize import ResizePolicy, resize_and_encode
from fm_assets.stages.image_text.decode import DecodeStage


@dataclass(frozen=True)
class Pass:
    """One timed pass over the images: wall and CPU seconds, CPU seconds per part (when known),
    the bytes written, and per image the output size and pHash (signed int64)."""

    wall_s: float
    cpu_s: float
    parts: dict[str, float]
    out_bytes: int
    sizes: list[tuple[int, int]]
    phashes: list[int]


def stage_pass(table: pa.Table, policy: ResizePolicy) -> Pass:
    stage = DecodeStage(resize=policy)
    result, wall, cpu = timed(lambda: stage.process(table))
    if result.quarantined.num_rows or result.kept.num_rows != table.num_rows:
        reasons = result.quarantined.column("reason").to_pylist()
        raise RuntimeError(f"the decode stage quarantined benchmark images: {reasons}")
    kept = result.kept
    sizes = list(
        zip(kept.column("width").to_pylist(), kept.column("height").to_pylist(), strict=True)
    )
    out_bytes = sum(len(image) for image in kept.column("image").to_pylist())
    return Pass(wall, cpu, {}, out_bytes, sizes, kept.column("phash").to_pylist())


def functions_pass(images: list[bytes], policy: ResizePolicy) -> Pass:
    parts = dict.fromkeys(("decode_image", "resize_and_encode", "phash", "pixel_hash"), 0.0)
    sizes: list[tuple[int, int]] = []
    hashes: list[int] = []
    out_bytes = 0
    clock = time.process_time  # parts in CPU seconds: on a shared machine wall time is noise
    wall, cpu = time.perf_counter(), clock()
    for data in images:
        t0 = clock()
        decoded = decode_image(data, "jpg")
        if not isinstance(decoded, DecodedImage):
            raise RuntimeError(f"a benchmark image did not decode: {decoded.reason}")
        t1 = clock()
        encoded, width, height = resize_and_encode(decoded.image, policy)
        t2 = clock()
        hashes.append(phash(decoded.image))
        t3 = clock()
        pixel_hash(decoded.image)
        t4 = clock()
        parts["decode_image"] += t1 - t0
        parts["resize_and_encode"] += t2 - t1
        parts["phash"] += t3 - t2
        parts["pixel_hash"] += t4 - t3
        sizes.append((width, height))
        out_bytes += len(encoded)
    return Pass(time.perf_counter() - wall, clock() - cpu, parts, out_bytes, sizes, hashes)
