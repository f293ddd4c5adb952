"""Quality: score every document (heuristics + classifier), then decide per dataset policy.

Two stages, so thresholds change without rescoring: `quality_scored_documents` stores the
Gopher/C4/FineWeb/script-aware scores and the classifier's P(high quality) for every document
and drops nothing; `quality_filtered_documents` reads those stored scores and applies the
policy's thresholds of each document's language family.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa

from fm_assets.curation.classifier.scoring import score_texts as classify
from fm_assets.curation.quality.families import LANGUAGE_RULES_VERSION, decide_by_family
from fm_assets.curation.quality.scores import RULES_VERSION, SCORE_COLUMNS, score_texts
from fm_assets.curation.quality.script import SCRIPT
from fm_assets.curation.quality.thresholds import QUALITY_RULES, QualityThresholds
from fm_assets.registries.classifiers import load_registered_classifier
from fm_assets.stages.base import Stage, StageResult, split_kept
from fm_assets.storage import schemas

RULES_BY_CODE = {rule.code: rule for rule in QUALITY_RULES}

# Scores only: every document of the batch is kept; `quality_filtered_documents` decides.
QUALITY_SCORED_DOCUMENTS = pa.schema(
    [
        *schemas.TEXT_DOCUMENTS,
        pa.field("language", pa.string(), nullable=False),
        # Nullable so that a table created before a rule set existed gains its columns (schema
        # evolution adds optional fields); the stage writes a value in every row.
        *(
            pa.field(name, dtype, nullable=name.startswith(SCRIPT))
            for name, dtype in SCORE_COLUMNS.items()
        ),
        pa.field("classifier_sha256", pa.string(), nullable=True),
        pa.field("classifier_score", pa.float64(), nullable=True),  # P(high quality)
    ]
)


@dataclass(frozen=True)
class QualityScoreStage(Stage):
    """Gopher/C4/FineWeb/script-aware quality scores and the classifier's score, as columns.

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
    """The dataset's quality thresholds applied to the stored scores (no rescoring), by language.

    Keep documents whose stored scores pass the thresholds of their language family (English,
    other spaced languages, CJK); quarantine the rest under the first failing rule's code
    (e.g. `gopher_min_words`, `script_min_units`, `quality_classifier`).
    """

    name: ClassVar[str] = "quality_filtered_documents"
    slices_per_cpu: ClassVar[int] = 1  # a fraction of a millisecond per document
    # 2: rules chosen per language family; reasons state the score and the bound.
    version: ClassVar[str] = f"2-{LANGUAGE_RULES_VERSION}"
    output_schema: ClassVar[pa.Schema] = schemas.TEXT_DOCUMENTS

    rules_json: str = "{}"  # {family: QualityThresholds}, canonical JSON (`rules_json`)
    min_classifier_score: float = 0.0

    def rules(self) -> dict[str, QualityThresholds]:
        """The thresholds of each language family this stage applies."""
        return parse_rules_json(self.rules_json)

    def process(self, batch: pa.Table) -> StageResult:
        rules = self.rules()
        scores = batch.select(list(SCORE_COLUMNS))
        decided = decide_by_family(scores, batch.column("language").to_pylist(), rules)
        classifier = batch.column("classifier_score").to_pylist()
        rejects: list[tuple[int, str, str]] = []
        for i, (family, reason) in enumerate(decided):
            if reason is not None:
                value = scores.column(RULES_BY_CODE[reason].column)[i].as_py()
                rejects.append((i, reason, rule_reason(reason, value, rules[family], family)))
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


def rule_reason(code: str, value: object, thresholds: QualityThresholds, family: str) -> str:
    """A quarantine reason a person can act on: the score, the bound, the family's rules."""
    rule = RULES_BY_CODE[code]
    bound = getattr(thresholds, rule.threshold)
    score = rule.column.split("__", 1)[1]
    shown = "missing" if value is None else f"{value:.4g}" if isinstance(value, float) else value
    return f"{score} {shown}, kept when {rule.op} {bound:g} ({family} rules)"


def thresholds_dict(thresholds: QualityThresholds) -> dict[str, object]:
    """A QualityThresholds as plain JSON values (rule_sets sorted)."""
    values = dataclasses.asdict(thresholds)
    values["rule_sets"] = sorted(values["rule_sets"])
    return values


def rules_json(rules: Mapping[str, QualityThresholds]) -> str:
    """Canonical JSON of each family's thresholds: the filter stage's config."""
    return json.dumps(
        {family: thresholds_dict(t) for family, t in sorted(rules.items())}, sort_keys=True
    )


def parse_rules_json(text: str) -> dict[str, QualityThresholds]:
    """The inverse of `rules_json`."""
    return {
        family: QualityThresholds(**{**raw, "rule_sets": frozenset(raw["rule_sets"])})
        for family, raw in json.loads(text).items()
    }
