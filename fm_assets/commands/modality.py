"""A landing batch's modality, decided from its files before anything lands."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fm_assets.formats.image_text import image_text_format
from fm_assets.storage.landing import IMAGE_TEXT_MODALITY, MODALITIES, TEXT_MODALITY


def file_modality(path: Path) -> str:
    """ "image-text" for a WebDataset tar of images or a Parquet file of image bytes, else
    "text" (WARC, WET, JSONL, HTML, text: what the text pipeline reads)."""
    return IMAGE_TEXT_MODALITY if image_text_format(path) is not None else TEXT_MODALITY


def batch_modality(paths: Sequence[Path], stated: str | None = None) -> str:
    """The one modality of `paths` (or `stated`, checked against them); a batch mixing
    modalities, or a file that is not what `stated` says, is refused naming the files."""
    if stated is not None and stated not in MODALITIES:
        raise ValueError(f"--modality must be one of {', '.join(MODALITIES)}, got {stated!r}")
    found = {Path(p): file_modality(Path(p)) for p in paths if Path(p).is_file()}
    kinds = sorted(set(found.values()))
    if stated is not None:
        wrong = [p.name for p, kind in found.items() if kind != stated]
        if wrong:
            what = (
                "not image-text files (a WebDataset tar of images, or Parquet with image bytes)"
                if stated == IMAGE_TEXT_MODALITY
                else "image-text files (WebDataset tars or Parquet with image bytes)"
            )
            raise ValueError(
                f"--modality {stated}, but {', '.join(sorted(wrong)[:5])} are {what}; land "
                "each modality as its own batch"
            )
        return stated
    if len(kinds) > 1:
        by_kind = {
            kind: sorted(p.name for p, k in found.items() if k == kind)[:3] for kind in kinds
        }
        described = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in by_kind.items())
        raise ValueError(
            f"these files mix modalities ({described}); a batch holds one modality: land each "
            "as its own batch"
        )
    return kinds[0] if kinds else TEXT_MODALITY
