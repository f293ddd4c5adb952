"""A `raw_pairs` table of images held in memory, as the landing stage writes it, for the image
benchmarks to hand to the image-text stages."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import pyarrow as pa

from fm_assets.storage.image_text_schemas import RAW_PAIRS


def raw_pairs(images: Sequence[tuple[str, bytes, str]], batch_id: str = "b-bench") -> pa.Table:
    """One `raw_pairs` row per (name, image bytes, declared extension), in order; the name is
    the sample's key and its caption."""
    rows = []
    for i, (name, data, extension) in enumerate(images):
        digest = hashlib.sha256(data).hexdigest()
        rows.append(
            {
                "doc_id": hashlib.sha256(f"{i}:{name}".encode()).hexdigest(),
                "raw_sha256": digest,
                "batch_id": batch_id,
                "record_id": f"bench:{i}",
                "source_file": "bench.tar",
                "source": "bench",
                "license": "CC0-1.0",
                "namespace": "bench",
                "url": None,
                "lang_hint": None,
                "external_id": name,
                "text": f"A photograph: {name}",
                "image_member": f"{i:09d}.{extension}",
                "record_offset": None,
                "record_line": None,
                "image_extension": extension,
                "metadata_json": None,
                "raw_size": len(data),
                "raw_content": data,
            }
        )
    return pa.Table.from_pylist(rows, schema=RAW_PAIRS)
