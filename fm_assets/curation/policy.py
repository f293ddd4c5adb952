"""Per-dataset curation decisions: which languages, quality thresholds, classifier, decontamination.

Stages *score* documents the same way for every dataset; a dataset's policy decides what is
kept. A source without a policy of its own gets the default web policy (`WEB_POLICY`): English
at lid.176 score >= 0.65, the Gopher, C4 and FineWeb rules at their published thresholds (each
language family judged by its own rule set), and the default quality classifier at
P(hq) >= 0.03. `none` (`NONE_POLICY`) opts out: every language, scores stored, nothing decided.
Where every number comes from: docs/curation.md (The default web policy).

Policies live in a TOML file named by `FM_POLICY_FILE`, keyed by the landing batch's `source`
(the dataset name given to `fm land --source`); each entry starts from its `base` and
overrides single fields:

    [default]                             # sources without an entry (absent: base = "web")
    base = "none"
    [datasets.web]
    base = "web"                          # or "none"; absent: "web"
    extractor = "trafilatura"             # or "resiliparse": HTML -> main text (below)
    allowed_languages = ["en", "de"]      # empty: every language
    min_language_score = 0.5
    quality_rule_sets = ["gopher_v1", "c4_v1", "fineweb_v1"]
    [datasets.web.quality_thresholds]     # overrides of QualityThresholds' published defaults
    gopher_min_words = 30                 # false turns a rule off
    [datasets.web.family_thresholds.cjk]  # overrides for one language family (families.py)
    script_min_units = 100
    [datasets.web.classifier]
    sha256 = "default"                    # the default classifier, a registered hash, or "none"
    min_score = 0.03
    [datasets.web.decontamination]
    mode = "drop"                         # or "redact"

`extractor` picks the HTML main-text extractor of the extract stage. On the article-extraction
benchmark (181 pages, `bench/results/parsers.md`) trafilatura, the default, scores macro token
F1 0.961; resiliparse 0.933 (lower precision: it keeps more boilerplate) at 8.4x the
stage's pages/s per CPU second (13.4x for the library calls alone). Changing it reruns
extraction and everything after it.

Changing a decision changes the config hash of the deciding stages only: they rerun from stored
scores, nothing is rescored.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from dataclasses import dataclass
from typing import Any, Final

from fm_assets.curation.quality.c4 import C4
from fm_assets.curation.quality.families import FAMILIES, rules_by_family
from fm_assets.curation.quality.fineweb import FINEWEB
from fm_assets.curation.quality.gopher import GOPHER
from fm_assets.curation.quality.scores import RULE_SETS
from fm_assets.curation.quality.thresholds import QualityThresholds
from fm_assets.settings import Settings

DECONTAMINATION_MODES = ("drop", "redact")
EXTRACTORS = ("trafilatura", "resiliparse")
WEB, NONE = "web", "none"
BASES: Final = (WEB, NONE)
# The classifier a policy names by this word is the registered default one (`fm classifier
# train --default-recipe` registers it, `fm run` trains it on first need); resolved to its
# sha256 when a batch's stages are built, so the hash is what the content key and card record.
DEFAULT_CLASSIFIER: Final = "default"
# The lowest P(hq) at which the default classifier keeps every article of the recipe's held-out
# sites, both the ground-truth body and the extracted page (bench/results/quality_classifier.md).
DEFAULT_MIN_CLASSIFIER_SCORE: Final = 0.03
# FineWeb's English threshold on lid.176's top-label probability.
DEFAULT_MIN_LANGUAGE_SCORE: Final = 0.65

Overrides = tuple[tuple[str, float | None], ...]


@dataclass(frozen=True)
class DatasetPolicy:
    """What one dataset keeps. Defaults are the default web policy; `NONE_POLICY` decides
    nothing."""

    name: str = "default"
    base: str = WEB  # one of BASES: what the fields below started from
    extractor: str = "trafilatura"  # one of EXTRACTORS
    allowed_languages: tuple[str, ...] = ("en",)  # () = every language
    min_language_score: float = DEFAULT_MIN_LANGUAGE_SCORE
    quality_rule_sets: tuple[str, ...] = (GOPHER, C4, FINEWEB)  # () = score only
    quality_thresholds: Overrides = ()  # overrides, sorted by name
    family_thresholds: tuple[tuple[str, Overrides], ...] = ()  # per family, sorted
    classifier_sha256: str | None = DEFAULT_CLASSIFIER  # None: no classifier
    min_classifier_score: float = DEFAULT_MIN_CLASSIFIER_SCORE
    decontamination: str = "drop"
    pii_redaction: bool = True

    def thresholds(self) -> QualityThresholds:
        """The `QualityThresholds` this policy applies (published defaults plus overrides)."""
        return dataclasses.replace(
            QualityThresholds(rule_sets=frozenset(self.quality_rule_sets)),
            **dict(self.quality_thresholds),  # type: ignore[arg-type]
        )

    def rules(self) -> dict[str, QualityThresholds]:
        """The thresholds of every language family (`families.rules_by_family`)."""
        overrides = {family: dict(values) for family, values in self.family_thresholds}
        return rules_by_family(self.thresholds(), overrides)

    def to_json(self) -> str:
        """Canonical JSON of every field: what a stage run records as the policy it ran under."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DatasetPolicy:
        raw = json.loads(text)
        unknown = sorted(set(raw) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"a recorded policy has unknown fields {unknown}; upgrade fm")
        tuples = {
            "allowed_languages": tuple(raw.get("allowed_languages", ())),
            "quality_rule_sets": tuple(raw.get("quality_rule_sets", ())),
            "quality_thresholds": tuple((k, v) for k, v in raw.get("quality_thresholds", ())),
            "family_thresholds": tuple(
                (family, tuple((k, v) for k, v in values))
                for family, values in raw.get("family_thresholds", ())
            ),
        }
        return cls(**{**raw, **tuples})


WEB_POLICY: Final = DatasetPolicy()
NONE_POLICY: Final = DatasetPolicy(
    base=NONE,
    allowed_languages=(),
    min_language_score=0.0,
    quality_rule_sets=(),
    classifier_sha256=None,
    min_classifier_score=0.0,
)
_BASE_POLICIES: Final = {WEB: WEB_POLICY, NONE: NONE_POLICY}


def load_policy(settings: Settings, dataset: str) -> DatasetPolicy:
    """The policy of `dataset`: its entry in settings.policy_file, else the file's `[default]`,
    else the default web policy; errors say where."""
    if settings.policy_file is None:
        return dataclasses.replace(WEB_POLICY, name=dataset)
    try:
        document = tomllib.loads(settings.policy_file.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read FM_POLICY_FILE {settings.policy_file}: {exc}") from exc
    where = str(settings.policy_file)
    entry = document.get("datasets", {}).get(dataset)
    if entry is not None:
        return _parse(dataset, entry, where)
    return _parse(dataset, document.get("default", {}), f"{where} [default]")


_KNOWN: Final = frozenset(
    {
        "base",
        "extractor",
        "allowed_languages",
        "min_language_score",
        "quality_rule_sets",
        "quality_thresholds",
        "family_thresholds",
        "classifier",
        "decontamination",
        "pii_redaction",
    }
)


def _parse(dataset: str, entry: dict[str, Any], where: str) -> DatasetPolicy:
    unknown = set(entry) - _KNOWN
    if unknown:
        raise ValueError(
            f"{where}: dataset {dataset!r} has unknown keys {sorted(unknown)}; "
            f"known: {sorted(_KNOWN)}"
        )
    base_name = entry.get("base", WEB)
    if base_name not in BASES:
        raise ValueError(f"{where}: dataset {dataset!r} has base {base_name!r}; known: {BASES}")
    base = _BASE_POLICIES[base_name]
    rule_sets = tuple(entry.get("quality_rule_sets", base.quality_rule_sets))
    if set(rule_sets) - set(RULE_SETS):
        raise ValueError(f"{where}: quality_rule_sets must be among {sorted(RULE_SETS)}")
    classifier = entry.get("classifier", {})
    sha256 = classifier.get("sha256", base.classifier_sha256)
    mode = entry.get("decontamination", {}).get("mode", base.decontamination)
    if mode not in DECONTAMINATION_MODES:
        raise ValueError(f"{where}: decontamination mode must be one of {DECONTAMINATION_MODES}")
    extractor = entry.get("extractor", base.extractor)
    if extractor not in EXTRACTORS:
        raise ValueError(
            f"{where}: dataset {dataset!r} has extractor {extractor!r}; known: {EXTRACTORS}"
        )
    policy = DatasetPolicy(
        name=dataset,
        base=base_name,
        extractor=extractor,
        allowed_languages=tuple(sorted(entry.get("allowed_languages", base.allowed_languages))),
        min_language_score=float(entry.get("min_language_score", base.min_language_score)),
        quality_rule_sets=rule_sets,
        quality_thresholds=_overrides(entry.get("quality_thresholds", {}), where, dataset),
        family_thresholds=_family_overrides(entry.get("family_thresholds", {}), where, dataset),
        classifier_sha256=None if sha256 in (None, NONE) else str(sha256),
        min_classifier_score=float(classifier.get("min_score", base.min_classifier_score)),
        decontamination=mode,
        pii_redaction=bool(entry.get("pii_redaction", base.pii_redaction)),
    )
    try:
        policy.rules()  # every threshold a number in range, every min below its max
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: dataset {dataset!r}: {exc}") from exc
    return policy


def _overrides(values: dict[str, Any], where: str, dataset: str) -> Overrides:
    fields = {f.name for f in dataclasses.fields(QualityThresholds)} - {"rule_sets"}
    bad = set(values) - fields
    if bad:
        raise ValueError(f"{where}: unknown quality thresholds {sorted(bad)} for {dataset!r}")
    if any(value is True for value in values.values()):
        raise ValueError(f"{where}: a threshold is a number, or false to turn its rule off")
    # TOML has no null: `false` turns a rule off.
    return tuple(sorted((k, None if v is False else v) for k, v in values.items()))


def _family_overrides(
    values: dict[str, Any], where: str, dataset: str
) -> tuple[tuple[str, Overrides], ...]:
    bad = set(values) - set(FAMILIES)
    if bad:
        raise ValueError(
            f"{where}: unknown language families {sorted(bad)} for {dataset!r}; "
            f"families: {list(FAMILIES)}"
        )
    return tuple((family, _overrides(values[family], where, dataset)) for family in sorted(values))
