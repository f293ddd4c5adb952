"""scored_pairs: the dataset's model scorers (CLIP similarity, aesthetic, NSFW, watermark, ...)
run on every pair, their scores stored, their thresholds applied.

A plug-in stage: which models run, from which local paths, with which thresholds, is the
policy's list of scorers (`curation/image_text_policy.ScorerSpec`); the models themselves are in
`curation/images/scorers.py`. A policy without scorers passes every pair through, unscored.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa
from PIL import Image

from fm_assets.curation.image_text_policy import ScorerSpec
from fm_assets.stages.base import Stage, StageResult, split_kept
from fm_assets.storage.image_text_schemas import PAIRS


@dataclass(frozen=True)
class ScoreStage(Stage):
    """Pairs within the policy's model-score thresholds, with every model's score stored.

    Run the policy's scorers on each pair (GPU if present, CPU otherwise) and quarantine pairs
    outside a scorer's min/max.
    """

    name: ClassVar[str] = "scored_pairs"
    version: ClassVar[str] = "1"
    output_schema: ClassVar[pa.Schema] = PAIRS

    scorers: tuple[ScorerSpec, ...] = ()
    # sha256 of each scorer's model files: new weights, new content key
    model_digests: tuple[str, ...] = ()

    @property
    def uses_models(self) -> bool:
        return bool(self.scorers)

    def process(self, batch: pa.Table) -> StageResult:
        if not self.scorers:
            return split_kept(batch, [True] * batch.num_rows, {}, self.output_schema, [])
        from fm_assets.curation.images.scorers import score_pairs

        images = [
            Image.open(io.BytesIO(data)).convert("RGB")
            for data in batch.column("image").to_pylist()
        ]
        captions = [str(t) for t in batch.column("text").to_pylist()]
        scores = score_pairs(self.scorers, self.model_digests, images, captions)
        keep: list[bool] = []
        rejects: list[tuple[int, str, str]] = []
        for row, values in enumerate(scores):
            problem = None
            for spec in self.scorers:
                reason = spec.decide(values[spec.name])
                if reason is not None:
                    problem = (f"{spec.name}_score_out_of_range", reason)
                    break
            keep.append(problem is None)
            if problem is not None:
                rejects.append((row, *problem))
        column = pa.array([sorted(values.items()) for values in scores], PAIRS.field("scores").type)
        return split_kept(batch, keep, {"scores": column}, self.output_schema, rejects)
