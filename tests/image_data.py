"""Image-text test data made in the tests: real photos from scikit-image's wheel, every edge case
Pillow can make, near-duplicates of the photos, and the two files the field lands them in
(WebDataset tars as img2dataset writes them, img2dataset's Parquet output). Nothing downloaded,
nothing committed: each test writes what it needs under its tmp_path."""

from __future__ import annotations

import io
import json
import struct
import tarfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image, ImageEnhance

# Distinct real photos shipped in scikit-image's wheel (`cat` is `chelsea` again: left out).
PHOTOS = (
    "astronaut",
    "brick",
    "camera",
    "chelsea",
    "clock",
    "coffee",
    "coins",
    "colorwheel",
    "grass",
    "gravel",
    "hubble_deep_field",
    "immunohistochemistry",
    "moon",
    "retina",
    "rocket",
    "cell",
)
CAPTIONS = {
    "astronaut": "Portrait of an astronaut in a white suit in front of the American flag",
    "brick": "A close view of a weathered red brick wall with grey mortar",
    "camera": "A man with a camera on a tripod standing in a grassy field",
    "chelsea": "An orange tabby cat looking to the side with green eyes",
    "clock": "A round wall clock with black hands on a white face",
    "coffee": "A cup of coffee with latte art on a saucer next to a spoon",
    "coins": "Old bronze coins laid out in rows on a dark background",
    "colorwheel": "A color wheel showing the spectrum of hues around a circle",
    "grass": "Dense green blades of grass filling the whole frame",
    "gravel": "Small grey stones of gravel seen from above",
    "hubble_deep_field": "Hundreds of distant galaxies in the Hubble deep field",
    "immunohistochemistry": "A stained tissue sample under the microscope showing cells",
    "moon": "The surface of the moon with craters in black and white",
    "retina": "A photograph of the human retina with its blood vessels",
    "rocket": "A rocket on the launch pad before lift off at dusk",
    "cell": "A single cell seen through a phase contrast microscope",
}


def photo(name: str) -> Image.Image:
    """A scikit-image sample photo as a Pillow image (RGB or L)."""
    import skimage.data

    if name in ("motorcycle_left", "motorcycle_right"):
        left, right, _ = skimage.data.stereo_motorcycle()
        pixels = left if name == "motorcycle_left" else right
    else:
        pixels = getattr(skimage.data, name)()
    if pixels.dtype != np.uint8:
        pixels = (pixels.astype(np.float64) / max(float(pixels.max()), 1.0) * 255).astype(np.uint8)
    return Image.fromarray(pixels)


def encode(image: Image.Image, fmt: str = "JPEG", **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **options)
    return out.getvalue()


def near_duplicates(image: Image.Image) -> dict[str, Image.Image]:
    """Transformed copies a near-dup detector should catch: resized, recompressed, a small
    crop, brighter."""
    w, h = image.size
    rgb = image.convert("RGB")
    return {
        "resized": rgb.resize((w * 3 // 4, h * 3 // 4), Image.Resampling.BILINEAR),
        "jpeg_q40": Image.open(io.BytesIO(encode(rgb, quality=40))),
        "cropped": rgb.crop((w // 80, h // 80, w - w // 80, h - h // 80)),
        "brighter": ImageEnhance.Brightness(rgb).enhance(1.1),
    }


@dataclass(frozen=True)
class Sample:
    """One image-text sample to write: its key, image bytes and extension, caption, metadata."""

    key: str
    image: bytes | None
    extension: str = "jpg"
    caption: str | None = "A photograph"
    metadata: dict[str, object] = field(default_factory=dict)


def photo_samples(names: Sequence[str] = PHOTOS, prefix: str = "") -> list[Sample]:
    """One JPEG sample per photo, captioned, keys in img2dataset's style (`000000001`)."""
    return [
        Sample(
            key=f"{prefix}{i:09d}",
            image=encode(photo(name).convert("RGB"), quality=90),
            caption=CAPTIONS.get(name, f"A photograph of {name.replace('_', ' ')}"),
            metadata={"url": f"https://images.example.org/{name}.jpg", "name": name},
        )
        for i, name in enumerate(names)
    ]


def write_webdataset(path: Path, samples: Sequence[Sample]) -> Path:
    """A WebDataset tar: `KEY.jpg`, `KEY.txt`, `KEY.json` per sample, as img2dataset writes."""
    with tarfile.open(path, "w") as archive:
        for sample in samples:
            members: list[tuple[str, bytes]] = []
            if sample.image is not None:
                members.append((sample.extension, sample.image))
            if sample.caption is not None:
                members.append(("txt", sample.caption.encode()))
            meta = {"key": sample.key, "caption": sample.caption, **sample.metadata}
            members.append(("json", json.dumps(meta).encode()))
            for extension, data in members:
                info = tarfile.TarInfo(f"{sample.key}.{extension}")
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return path


def write_parquet(path: Path, samples: Sequence[Sample], image_column: str = "jpg") -> Path:
    """img2dataset's Parquet output: key, caption, url, status, error_message, the image column."""
    rows = {
        "key": [s.key for s in samples],
        "caption": [s.caption for s in samples],
        "url": [s.metadata.get("url") for s in samples],
        "status": ["success" if s.image is not None else "failed_to_download" for s in samples],
        "error_message": [None if s.image is not None else "HTTP 404" for s in samples],
        image_column: pa.array([s.image for s in samples], pa.binary()),
    }
    pq.write_table(pa.table(rows), path)
    return path


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def bomb_png(width: int = 200_000, height: int = 200_000) -> bytes:
    """A few hundred bytes of PNG whose header claims width x height pixels."""
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    pixels = zlib.compress(b"\x00" * 16)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", pixels)
        + _png_chunk(b"IEND", b"")
    )


def exif_rotated_jpeg(image: Image.Image) -> bytes:
    """`image` stored sideways with EXIF orientation 6 (display rotated 90 degrees clockwise)."""
    stored = image.convert("RGB").transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6
    return encode(stored, quality=90, exif=exif.tobytes())


def animated_gif(image: Image.Image) -> bytes:
    frames = [image.convert("RGB").rotate(angle) for angle in (0, 10, 20)]
    return encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)


def edge_cases(base: Image.Image) -> dict[str, tuple[bytes, str]]:
    """name -> (image bytes, declared extension): images a decoder must normalize (first group)
    and files it must quarantine, each for its own reason (second group)."""
    rgb = base.convert("RGB")
    sixteen = Image.fromarray(np.asarray(base.convert("L"), dtype=np.uint16) * 257)
    palette = base.convert("RGB").convert("P", palette=Image.Palette.ADAPTIVE, colors=64)
    palette.info["transparency"] = 0
    jpeg = encode(rgb, quality=90)
    return {
        # normalized
        "cmyk": (encode(rgb.convert("CMYK"), quality=90), "jpg"),
        "sixteen_bit": (encode(sixteen, "PNG"), "png"),
        "palette_alpha": (encode(palette, "PNG"), "png"),
        "rgba": (encode(rgb.convert("RGBA"), "PNG"), "png"),
        "exif_rotated": (exif_rotated_jpeg(base), "jpg"),
        "progressive": (encode(rgb, quality=85, progressive=True), "jpg"),
        "animated": (animated_gif(base), "gif"),
        "webp": (encode(rgb, "WEBP", quality=80), "webp"),
        # quarantined
        "truncated": (jpeg[: len(jpeg) // 2], "jpg"),
        "zero_byte": (b"", "jpg"),
        "not_an_image": (b"<html><body>404 not found</body></html>", "jpg"),
        "wrong_extension": (encode(rgb, "PNG"), "jpg"),
        "bomb": (bomb_png(), "png"),
    }


def pairs_table(rows: Sequence[dict[str, object]]) -> pa.Table:
    """A table of image-text pairs (the schema every stage from `decoded_pairs` on reads), each
    row a plausible decoded pair with the given fields overridden."""
    from fm_assets.storage.image_text_schemas import PAIRS

    full = []
    for i, row in enumerate(rows):
        full.append(
            {
                "doc_id": f"{i:064x}",
                "raw_sha256": f"{i:064x}",
                "batch_id": "b-test",
                "record_id": f"file:{i}",
                "source_file": "x.tar",
                "source": "test",
                "license": "CC0-1.0",
                "namespace": "cloud",
                "text": "A red brick house with a green door on a quiet street",
                "image": b"\xff\xd8",
                "image_format": "jpeg",
                "width": 512,
                "height": 384,
                "original_width": 1024,
                "original_height": 768,
                "source_format": "JPEG",
                "source_mode": "RGB",
                "frames": 1,
                "pixel_hash": f"{i:064x}",
                "phash": i,
                **row,
            }
        )
    return pa.Table.from_pylist(full, schema=PAIRS)
