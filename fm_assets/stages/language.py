"""language_tagged_documents: fastText lid.176 language and score per document; policy decides."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa

from fm_assets.curation.langid import LANGID_MODEL_VERSION, UNDETERMINED, identify_languages
from fm_assets.stages.base import Stage, StageResult, split_kept
from fm_assets.storage import schemas


@dataclass(frozen=True)
class LanguageStage(Stage):
    """fastText lid.176 language and score; languages the dataset does not allow quarantined.

    Tag each document's language; quarantine what the dataset's policy does not allow.

    `allowed` empty keeps every language the model can name; a document with no letters the
    model can judge ("und") is always quarantined.
    """

    name: ClassVar[str] = "language_tagged_documents"
    slices_per_cpu: ClassVar[int] = 1  # a fraction of a millisecond per document
    version: ClassVar[str] = f"1-{LANGID_MODEL_VERSION}"
    output_schema: ClassVar[pa.Schema] = schemas.LANGUAGE_TAGGED_DOCUMENTS

    allowed: tuple[str, ...] = ()
    min_score: float = 0.0

    def process(self, batch: pa.Table) -> StageResult:
        labels = identify_languages(batch.column("text").to_pylist())
        keep: list[bool] = []
        rejects: list[tuple[int, str, str]] = []
        for i, (lang, score) in enumerate(labels):
            problem = self._decide(lang, score)
            keep.append(problem is None)
            if problem is not None:
                rejects.append((i, *problem))
        new = {"language": [lang for lang, _ in labels], "language_score": [s for _, s in labels]}
        return split_kept(batch, keep, new, self.output_schema, rejects)

    def _decide(self, lang: str, score: float) -> tuple[str, str] | None:
        if lang == UNDETERMINED:
            return "language_undetermined", "no text the language model can judge"
        if score < self.min_score:
            return (
                "language_low_confidence",
                f"{lang} at {score:.2f}, below the dataset's minimum {self.min_score:.2f}",
            )
        if self.allowed and lang not in self.allowed:
            return (
                "language_not_allowed",
                f"{lang} ({score:.2f}) is not among the dataset's languages {list(self.allowed)}",
            )
        return None
