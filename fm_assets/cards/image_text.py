"""The image section of an image-text version's card: resolution and aspect-ratio histograms, and
contact sheets (PNG) of kept images and of dropped images per reason, pictures a person can
look at.

The kept sheet samples the version's pairs with a seed from its content hash (the same card every
time); a dropped sheet shows the landed image of each quarantined pair (from `raw_pairs`), or a
tile naming the reason where there is no picture to show (an empty file, a broken one).
"""

from __future__ import annotations

import io
import random
import textwrap
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from PIL import Image, ImageDraw, ImageOps, UnidentifiedImageError

from fm_assets.cards.plots import histogram_plot
from fm_assets.curation.images.aspect import ASPECT_BUCKETS, aspect_bucket
from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.versions.dataset_version import DatasetVersion
from fm_assets.versions.reader import version_documents, version_rows

RESOLUTION_PLOT = "longer_side_pixels.svg"
ASPECT_PLOT = "aspect_ratio_percent.svg"
KEPT_SHEET = "kept_images.png"
TILE, COLUMNS, CAPTION_LINES = 160, 6, 3
KEPT_TILES, DROPPED_TILES = 24, 12
_BACKGROUND, _INK, _MUTED = (255, 255, 255), (20, 20, 20), (110, 110, 110)


@dataclass(frozen=True)
class ImageCard:
    """What an image-text card adds: plots and sheets by file name, Markdown lines, figures."""

    files: dict[str, bytes]
    markdown: list[str]
    summary: dict[str, object]


def dropped_sheet_name(rule: str) -> str:
    return f"dropped_{rule}.png"


def image_card(settings: Settings, version: DatasetVersion) -> ImageCard:
    """The image section of `version`'s card."""
    final = version.pipeline.final
    sizes = version_documents(
        settings, version, final, ("doc_id", "original_width", "original_height", "width", "height")
    )
    widths = sizes.column("original_width").to_numpy().astype(np.int64)
    heights = sizes.column("original_height").to_numpy().astype(np.int64)
    longer = np.maximum(widths, heights)
    ratio_percent = np.round(widths / np.maximum(heights, 1) * 100).astype(np.int64)
    buckets = Counter(
        aspect_bucket(int(w), int(h)).name
        for w, h in zip(
            sizes.column("width").to_pylist(), sizes.column("height").to_pylist(), strict=True
        )
    )
    files = {
        RESOLUTION_PLOT: histogram_plot(longer, "pixels on the longer side (as landed)"),
        ASPECT_PLOT: histogram_plot(ratio_percent, "width as a percent of height"),
        KEPT_SHEET: _kept_sheet(settings, version, sizes.column("doc_id").to_pylist()),
    }
    dropped = _dropped_sheets(settings, version)
    files.update({dropped_sheet_name(rule): sheet for rule, sheet in dropped.items()})
    lines = ["## Images", ""]
    lines += [f"![longer side]({RESOLUTION_PLOT})", "", f"![aspect ratio]({ASPECT_PLOT})", ""]
    lines += ["| Aspect bucket | Pairs |", "|---|---|"]
    lines += [f"| {b.name} | {buckets.get(b.name, 0):,} |" for b in ASPECT_BUCKETS]
    lines += ["", "### Kept images (a random sample)", "", f"![kept images]({KEPT_SHEET})", ""]
    if dropped:
        lines += ["### Dropped images, by reason", ""]
        for rule in sorted(dropped):
            lines += [f"**{rule}**", "", f"![{rule}]({dropped_sheet_name(rule)})", ""]
    summary = {
        "longer_side": {
            "min": int(longer.min()) if longer.size else None,
            "p50": float(np.percentile(longer, 50)) if longer.size else None,
            "max": int(longer.max()) if longer.size else None,
        },
        "aspect_buckets": {b.name: buckets.get(b.name, 0) for b in ASPECT_BUCKETS},
        "contact_sheets": sorted(n for n in files if n.endswith(".png")),
    }
    return ImageCard(files, lines, summary)


def _kept_sheet(settings: Settings, version: DatasetVersion, doc_ids: list[str]) -> bytes:
    chosen = sorted(doc_ids)
    random.Random(version.content_hash).shuffle(chosen)
    chosen = chosen[:KEPT_TILES]
    rows = version_documents(
        settings,
        version,
        version.pipeline.final,
        ("doc_id", "image", "text"),
        catalog.where_in("doc_id", chosen) if chosen else None,
    )
    order = {d: i for i, d in enumerate(chosen)}
    tiles = sorted(rows.to_pylist(), key=lambda r: order[r["doc_id"]])
    return contact_sheet([(r["image"], r["text"]) for r in tiles], "kept")


def _dropped_sheets(settings: Settings, version: DatasetVersion) -> dict[str, bytes]:
    quarantine = version_rows(settings, version, "quarantine", ("doc_id", "rule", "reason"))
    if quarantine.num_rows == 0:
        return {}
    first = version.pipeline.names[0]
    sheets = {}
    for rule in sorted(set(quarantine.column("rule").to_pylist())):
        rows = quarantine.filter(pc.equal(quarantine.column("rule"), rule))
        rows = rows.slice(0, DROPPED_TILES)
        ids = [d for d in rows.column("doc_id").to_pylist() if d]
        raw = (
            version_documents(
                settings, version, first, ("doc_id", "raw_content"), catalog.where_in("doc_id", ids)
            )
            if ids
            else pa.table({"doc_id": pa.array([], pa.string())})
        )
        images = (
            dict(
                zip(
                    raw.column("doc_id").to_pylist(),
                    raw.column("raw_content").to_pylist(),
                    strict=True,
                )
            )
            if raw.num_rows
            else {}
        )
        tiles = [
            (images.get(doc_id or ""), reason)
            for doc_id, reason in zip(
                rows.column("doc_id").to_pylist(), rows.column("reason").to_pylist(), strict=True
            )
        ]
        sheets[rule] = contact_sheet(tiles, rule)
    return sheets


def contact_sheet(tiles: list[tuple[bytes | None, str]], title: str) -> bytes:
    """A PNG grid of thumbnails, each above a few lines of its caption (or reason); a tile with
    no decodable picture shows the text alone on grey."""
    count = max(len(tiles), 1)
    columns = min(COLUMNS, count)
    rows = (count + columns - 1) // columns
    caption_px = 12 * CAPTION_LINES + 6
    sheet = Image.new("RGB", (columns * TILE, 24 + rows * (TILE + caption_px)), _BACKGROUND)
    draw = ImageDraw.Draw(sheet)
    draw.text((6, 6), f"{title}: {len(tiles)} shown", fill=_INK)
    for i, (data, text) in enumerate(tiles):
        x, y = (i % columns) * TILE, 24 + (i // columns) * (TILE + caption_px)
        thumbnail = _thumbnail(data)
        if thumbnail is None:
            draw.rectangle((x + 4, y + 4, x + TILE - 4, y + TILE - 4), fill=(225, 225, 225))
            draw.text((x + 10, y + TILE // 2 - 6), "no picture", fill=_MUTED)
        else:
            sheet.paste(
                thumbnail, (x + (TILE - thumbnail.width) // 2, y + (TILE - thumbnail.height) // 2)
            )
        lines = textwrap.wrap(" ".join(text.split()), width=26)[:CAPTION_LINES]
        for n, line in enumerate(lines):
            draw.text((x + 4, y + TILE + 2 + 12 * n), line, fill=_INK)
    out = io.BytesIO()
    sheet.save(out, format="PNG", optimize=True)
    return out.getvalue()


def _thumbnail(data: bytes | None) -> Image.Image | None:
    if not data:
        return None
    try:
        opened = Image.open(io.BytesIO(data))
        if opened.width * opened.height > 50_000_000:  # a bomb's header: never decode it here
            return None
        image = ImageOps.exif_transpose(opened).convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        return None
    image.thumbnail((TILE - 8, TILE - 8))
    return image
