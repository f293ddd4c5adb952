"""Per-dataset curation decisions: which languages, quality thresholds, classifier, decontamination.

Stages *score* documents the same way for every dataset; a dataset's policy decides what is
kept. Policies live in a TOML file named by `FM_POLICY_FILE`, keyed by the landing batch's
`source` (the dataset name given to `fm land --source`):

    [datasets.web]
    extractor = "trafilatura"             # or "resiliparse": HTML -> main text (below)
    allowed_languages = ["en", "de"]      # empty or absent: every language
    min_language_score = 0.5
    quality_rule_sets = ["gopher_v1", "c4_v1"]
    [datasets.web.quality_thresholds]     # overrides of QualityThresholds' published defaults
    gopher_min_words = 30
    [datasets.web.classifier]
    sha256 = "39a0d7..."                  # a model registered with `fm classifier train`
    min_score = 0.2
    [datasets.web.decontamination]
    mode = "drop"                         # or "redact"

`extractor` picks the HTML main-text extractor of the extract stage. On the article-extraction
benchmark (181 pages, `bench/results/parsers.md`) trafilatura, the default, scores macro token
F1 0.961; resiliparse 0.933 (lower precision: it keeps more boilerplate) at 8x the stage's
pages/s (15x for the library calls alone). Choose resiliparse for a dataset whose volume makes
trafilatura the bottleneck and whose quality filters downstream remove the extra boilerplate.
Changing it reruns extraction and everything after it for that dataset's batches.

A dataset without an entry gets `DEFAULT_POLICY`: trafilatura, every language, scores stored
but no quality threshold applied (thresholds are a per-dataset decision;
`deploy/policies.example.toml` shows a web policy), PII redacted, contamination dropped,
near-duplicates removed. Changing a decision changes the config hash of the deciding stages
only: they rerun from stored scores, nothing is rescored.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from typing import Any

from fm_assets.curation.quality.scores import RULE_SETS
from fm_assets.curation.quality.thresholds import QualityThresholds
from fm_assets.settings import Settings

DECONTAMINATION_MODES = ("drop", "redact")
EXTRACTORS = ("trafilatura", "resiliparse")


@dataclass(frozen=True)
class DatasetPolicy:
    """What one dataset keeps; every field has an embedded default."""

    name: str = "default"
    extractor: str = "trafilatura"  # one of EXTRACTORS
    allowed_languages: tuple[str, ...] = ()  # () = every language
    min_language_score: float = 0.0
    quality_rule_sets: tuple[str, ...] = ()  # () = score only, decide nothing
    quality_thresholds: tuple[tuple[str, float | None], ...] = ()  # overrides, sorted by name
    classifier_sha256: str | None = None
    min_classifier_score: float = 0.0
    decontamination: str = "drop"
    pii_redaction: bool = True

    def thresholds(self) -> Any:
        """The `QualityThresholds` this policy applies (published defaults plus overrides)."""

        return dataclasses.replace(
            QualityThresholds(rule_sets=frozenset(self.quality_rule_sets)),
            **dict(self.quality_thresholds),  # type: ignore[arg-type]
        )


DEFAULT_POLICY = DatasetPolicy()


def load_policy(settings: Settings, dataset: str) -> DatasetPolicy:
    """The policy of `dataset` from settings.policy_file, or DEFAULT_POLICY; errors say where."""
    if settings.policy_file is None:
        return dataclasses.replace(DEFAULT_POLICY, name=dataset)
    try:
        document = tomllib.loads(settings.policy_file.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read FM_POLICY_FILE {settings.policy_file}: {exc}") from exc
    entry = document.get("datasets", {}).get(dataset)
    if entry is None:
        return dataclasses.replace(DEFAULT_POLICY, name=dataset)
    return _parse(dataset, entry, str(settings.policy_file))


def _parse(dataset: str, entry: dict[str, Any], where: str) -> DatasetPolicy:
    known = {
        "extractor",
        "allowed_languages",
        "min_language_score",
        "quality_rule_sets",
        "quality_thresholds",
        "classifier",
        "decontamination",
        "pii_redaction",
    }
    unknown = set(entry) - known
    if unknown:
        raise ValueError(
            f"{where}: dataset {dataset!r} has unknown keys {sorted(unknown)}; "
            f"known: {sorted(known)}"
        )

    fields = {f.name for f in dataclasses.fields(QualityThresholds)} - {"rule_sets"}
    thresholds = entry.get("quality_thresholds", {})
    bad = set(thresholds) - fields
    if bad:
        raise ValueError(f"{where}: unknown quality thresholds {sorted(bad)} for {dataset!r}")
    rule_sets = tuple(entry.get("quality_rule_sets", DEFAULT_POLICY.quality_rule_sets))
    if set(rule_sets) - set(RULE_SETS):
        raise ValueError(f"{where}: quality_rule_sets must be among {sorted(RULE_SETS)}")
    classifier = entry.get("classifier", {})
    mode = entry.get("decontamination", {}).get("mode", "drop")
    if mode not in DECONTAMINATION_MODES:
        raise ValueError(f"{where}: decontamination mode must be one of {DECONTAMINATION_MODES}")
    extractor = entry.get("extractor", DEFAULT_POLICY.extractor)
    if extractor not in EXTRACTORS:
        raise ValueError(
            f"{where}: dataset {dataset!r} has extractor {extractor!r}; known: {EXTRACTORS}"
        )
    return DatasetPolicy(
        name=dataset,
        extractor=extractor,
        allowed_languages=tuple(sorted(entry.get("allowed_languages", ()))),
        min_language_score=float(entry.get("min_language_score", 0.0)),
        quality_rule_sets=rule_sets,
        quality_thresholds=tuple(sorted(thresholds.items())),
        classifier_sha256=classifier.get("sha256"),
        min_classifier_score=float(classifier.get("min_score", 0.0)),
        decontamination=mode,
        pii_redaction=bool(entry.get("pii_redaction", True)),
    )
