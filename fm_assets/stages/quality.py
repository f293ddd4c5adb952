"""Quality: score every document (heuristics + classifier), then decide per dataset policy.

Two stages, so thresholds change without rescoring: `quality_scored_documents` stores the
Gopher/C4/FineWeb scores and the classifier's P(high quality) for every document and drops
nothing; `quality_filtered_documents` reads those stored scores and applies the policy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa

from fm_assets.curation.classifier.scoring import score_texts as classify
from fm_assets.curation.quality.scores import RULES_VERSION, SCORE_COLUMNS, score_texts
from fm_assets.curation.quality.thresholds import QualityThresholds, decide_batch
from fm_assets.registries.classifiers import load_registered_classifier
from fm_assets.stages.base import Stage, StageResult, split_kept
from fm_assets.storage import schemas

# Scores only: every document of the batch is kept; `quality_filtered_documents` decides.
QUALITY_SCORED_DOCUMENTS = pa.schema(
    [
        *schemas.TEXT_DOCUMENTS,
        pa.field("language", pa.string(), nullable=False),
        *(pa.field(name, dtype, nullable=False) for name, dtype in SCORE_COLUMNS.items()),
        pa.field("classifier_sha256", pa.string(), nullable=True),
        pa.field("classifier_score", pa.float64(), nullable=True),  # P(high quality)
    ]
)


@dataclass(frozen=True)
class QualityScoreStage(Stage):
    """Gopher/C4/FineWeb quality scores and the registered classifier's score, as columns.

    Store heuristic scores and, when the policy names one, a registered classifier's score.
    """

    name: ClassVar[str] = "quality_scored_documents"
    version: ClassVar[str] = f"1-{RULES_VERSION}"
    output_schema: ClassVar[pa.Schema] = QUALITY_SCORED_DOCUMENTS

    classifier_sha256: str | None = None
    # Where to load the model and reach its store: not content (the sha256 is).
    classifier_uri: str | None = field(default=None, compare=False)
    s3_endpoint: str | None = field(default=None, compare=False)

    def process(self, batch: pa.Table) -> StageResult:

        texts = batch.column("text").to_pylist()
        columns: dict[str, list[object]] = dict(score_texts(texts))  # type: ignore[arg-type]
        n = len(texts)
        if self.classifier_sha256 and self.classifier_uri:
            model = load_registered_classifier(
                self.classifier_uri, self.classifier_sha256, self.s3_endpoint
            )
            columns["classifier_score"] = list(classify(model, texts))
            columns["classifier_sha256"] = [self.classifier_sha256] * n
        else:
            columns["classifier_score"] = [None] * n
            columns["classifier_sha256"] = [None] * n
        return split_kept(batch, [True] * n, columns, self.output_schema, [])


@dataclass(frozen=True)
class QualityFilterStage(Stage):
    """The dataset's quality thresholds applied to the stored scores (no rescoring).

    Keep documents whose stored scores pass the dataset's thresholds; quarantine the rest
    under the first failing rule's code (e.g. `gopher_min_words`, `quality_classifier`).
    """

    name: ClassVar[str] = "quality_filtered_documents"
    version: ClassVar[str] = "1"
    output_schema: ClassVar[pa.Schema] = schemas.TEXT_DOCUMENTS

    thresholds_json: str = "{}"  # the policy's QualityThresholds, canonical JSON (config hash)
    min_classifier_score: float = 0.0

    def process(self, batch: pa.Table) -> StageResult:

        raw = json.loads(self.thresholds_json)
        thresholds = QualityThresholds(**{**raw, "rule_sets": frozenset(raw.get("rule_sets", ()))})
        scores = batch.select(list(SCORE_COLUMNS))
        reasons = decide_batch(scores, thresholds)
        classifier = batch.column("classifier_score").to_pylist()
        rejects: list[tuple[int, str, str]] = []
        for i, reason in enumerate(reasons):
            if reason is not None:
                rejects.append((i, reason, f"fails the dataset's quality rule {reason}"))
            elif classifier[i] is not None and classifier[i] < self.min_classifier_score:
                rejects.append(
                    (
                        i,
                        "quality_classifier",
                        f"classifier P(high quality) {classifier[i]:.3f} below "
                        f"{self.min_classifier_score}",
                    )
                )
        rejected = {i for i, _, _ in rejects}
        keep = [i not in rejected for i in range(batch.num_rows)]
        return split_kept(batch, keep, {}, self.output_schema, rejects)


def thresholds_json(thresholds: object) -> str:
    """Canonical JSON of a QualityThresholds (rule_sets sorted): the filter stage's config."""
    import dataclasses

    values = dataclasses.asdict(thresholds)  # type: ignore[call-overload]
    values["rule_sets"] = sorted(values["rule_sets"])
    return json.dumps(values, sort_keys=True)
