"""filtered_pairs: the policy's geometry and caption rules, and the caption's language.

Each rule has a stable code and a reason a person can act on; the first rule a pair breaks is
its quarantine reason. The caption's language (lid.176) is stored on every kept pair.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa

from fm_assets.curation.images.captions import BOILERPLATE_CAPTION, boilerplate
from fm_assets.curation.langid import LanguagePolicy, identify_languages
from fm_assets.stages.base import Stage, StageResult, split_kept
from fm_assets.storage.image_text_schemas import PAIRS


@dataclass(frozen=True)
class PairFilterStage(Stage):
    """Pairs within the policy's image size, aspect ratio, caption length and language.

    Quarantine small or extreme images, short, long or boilerplate captions, and captions in a
    language the dataset does not keep.
    """

    name: ClassVar[str] = "filtered_pairs"
    version: ClassVar[str] = "1"
    output_schema: ClassVar[pa.Schema] = PAIRS

    min_side: int = 201
    max_aspect_ratio: float = 3.0
    min_caption_chars: int = 6
    min_caption_words: int = 3
    max_caption_chars: int = 2_000
    caption_languages: tuple[str, ...] = ("en",)
    min_caption_language_score: float = 0.3
    drop_boilerplate_captions: bool = True

    def process(self, batch: pa.Table) -> StageResult:
        texts = [str(t) for t in batch.column("text").to_pylist()]
        widths = batch.column("original_width").to_pylist()
        heights = batch.column("original_height").to_pylist()
        languages = identify_languages(texts, max_chars=500)
        language_policy = (
            LanguagePolicy(frozenset(self.caption_languages), self.min_caption_language_score)
            if self.caption_languages
            else None
        )
        keep: list[bool] = []
        rejects: list[tuple[int, str, str]] = []
        for row, text in enumerate(texts):
            problem = self._geometry(int(widths[row]), int(heights[row])) or self._caption(text)
            if problem is None and language_policy is not None:
                lang, score = languages[row]
                code = language_policy.decide(lang, score)
                if code is not None:
                    allowed = ", ".join(self.caption_languages)
                    problem = (
                        code,
                        f"caption language {lang} at {score:.2f}; the dataset keeps "
                        f"{allowed} at >= {self.min_caption_language_score:.2f}",
                    )
            keep.append(problem is None)
            if problem is not None:
                rejects.append((row, *problem))
        new = {
            "language": [lang for lang, _ in languages],
            "language_score": [score for _, score in languages],
        }
        return split_kept(batch, keep, new, self.output_schema, rejects)

    def _geometry(self, width: int, height: int) -> tuple[str, str] | None:
        side = min(width, height)
        if side < self.min_side:
            return (
                "image_too_small",
                f"{width}x{height}: the smaller side {side} is under "
                f"the policy's min_side {self.min_side}",
            )
        ratio = max(width, height) / max(side, 1)
        if ratio > self.max_aspect_ratio:
            return (
                "extreme_aspect_ratio",
                f"{width}x{height}: aspect ratio {ratio:.2f} is over "
                f"the policy's max_aspect_ratio {self.max_aspect_ratio:g}",
            )
        return None

    def _caption(self, text: str) -> tuple[str, str] | None:
        stripped = text.strip()
        # First: "IMG_4032.JPG" is also short, but its length is not what is wrong with it.
        if self.drop_boilerplate_captions:
            why = boilerplate(stripped)
            if why is not None:
                return (BOILERPLATE_CAPTION, why)
        if len(stripped) < self.min_caption_chars:
            return (
                "caption_too_short",
                f"{len(stripped)} characters, under the policy's "
                f"min_caption_chars {self.min_caption_chars}",
            )
        words = len(stripped.split())
        if words < self.min_caption_words:
            return (
                "caption_too_few_words",
                f"{words} words, under the policy's min_caption_words {self.min_caption_words}",
            )
        if len(stripped) > self.max_caption_chars:
            return (
                "caption_too_long",
                f"{len(stripped):,} characters, over the policy's "
                f"max_caption_chars {self.max_caption_chars:,}",
            )
        return None
