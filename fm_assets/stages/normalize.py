"""normalized_documents: Unicode NFC and whitespace normalisation."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa

from fm_assets.stages.base import Stage, StageResult, split_kept
from fm_assets.storage import schemas

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_HSPACE = re.compile(r"[^\S\n]+")  # whitespace other than newlines
_BLANK_LINES = re.compile(r"\n{3,}")


def normalize_text(text: str) -> str:
    """NFC; one newline style; runs of spaces/tabs to one space; at most one blank line."""
    text = unicodedata.normalize("NFC", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text)
    text = _HSPACE.sub(" ", text)
    text = "\n".join(line.strip() for line in text.split("\n"))
    return _BLANK_LINES.sub("\n\n", text).strip()


@dataclass(frozen=True)
class NormalizeStage(Stage):
    """Unicode NFC and whitespace normalisation; a document left empty is quarantined.

    Normalise text; a document left empty is quarantined.
    """

    name: ClassVar[str] = "normalized_documents"
    slices_per_cpu: ClassVar[int] = 1  # a fraction of a millisecond per document
    version: ClassVar[str] = "1"
    output_schema: ClassVar[pa.Schema] = schemas.TEXT_DOCUMENTS

    def process(self, batch: pa.Table) -> StageResult:
        texts = [normalize_text(t) for t in batch.column("text").to_pylist()]
        keep = [bool(t) for t in texts]
        rejects = [
            (i, "empty_text", "no text left after whitespace normalisation")
            for i, ok in enumerate(keep)
            if not ok
        ]
        return split_kept(batch, keep, {"text": texts}, self.output_schema, rejects)
