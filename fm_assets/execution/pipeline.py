"""The curation pipeline: the ordered stages every landing batch goes through.

Inserting a stage is a local change: write the `Stage` class (its `name` is its table, asset and
pipeline entry) and add one `StageEntry` here. The Dagster assets, checks, CLI and runner all
follow this list.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fm_assets.contamination.registry import CONTAMINATION_RULES_VERSION
from fm_assets.contamination.store import registry_ref
from fm_assets.curation.policy import DEFAULT_CLASSIFIER, DatasetPolicy, load_policy
from fm_assets.registries.classifiers import ClassifierInfo, default_classifier, require_classifier
from fm_assets.registries.tokenizers import default_tokenizer
from fm_assets.settings import Settings
from fm_assets.stages.base import Stage
from fm_assets.stages.decontaminate import DecontaminateStage
from fm_assets.stages.extract import ExtractStage
from fm_assets.stages.language import LanguageStage
from fm_assets.stages.near_dedup import NearDupStage
from fm_assets.stages.normalize import NormalizeStage
from fm_assets.stages.pii import PiiStage
from fm_assets.stages.quality import QualityFilterStage, QualityScoreStage, rules_json
from fm_assets.stages.raw import RawStage
from fm_assets.stages.tokenize import TokenizeStage

# Builds a stage for a dataset from its policy (the modality's policy type).
StageBuilder = Callable[[Settings, Any], Stage]


def _raw(settings: Settings, policy: DatasetPolicy) -> Stage:
    return RawStage(
        max_document_bytes=settings.max_document_bytes, s3_endpoint=settings.s3_endpoint
    )


def resolve_policy(settings: Settings, policy: DatasetPolicy) -> DatasetPolicy:
    """`policy` with the default classifier named by its registered sha256 (what the content
    key and the records of a run carry); NoDefaultClassifier when none is registered."""
    if policy.classifier_sha256 != DEFAULT_CLASSIFIER:
        return policy
    return dataclasses.replace(policy, classifier_sha256=default_classifier(settings).model_sha256)


def _classifier(settings: Settings, sha256: str) -> ClassifierInfo:
    if sha256 == DEFAULT_CLASSIFIER:
        return default_classifier(settings)
    return require_classifier(settings, sha256)


def _quality_scores(settings: Settings, policy: DatasetPolicy) -> Stage:
    if policy.classifier_sha256 is None:
        return QualityScoreStage()
    info = _classifier(settings, policy.classifier_sha256)
    return QualityScoreStage(
        classifier_sha256=info.model_sha256,
        classifier_uri=info.uri,
        s3_endpoint=settings.s3_endpoint,
    )


def _quality_filter(settings: Settings, policy: DatasetPolicy) -> Stage:
    return QualityFilterStage(
        rules_json=rules_json(policy.rules()),
        # Without a classifier its score is null and never judged; keep the config honest.
        min_classifier_score=policy.min_classifier_score if policy.classifier_sha256 else 0.0,
    )


def _decontaminate(settings: Settings, policy: DatasetPolicy) -> Stage:
    return DecontaminateStage(
        registry=registry_ref(settings),
        mode=policy.decontamination,
        rules_version=CONTAMINATION_RULES_VERSION,
        settings=settings,
    )


def _tokenize(settings: Settings, policy: DatasetPolicy) -> Stage:
    info = default_tokenizer(settings)
    return TokenizeStage(
        tokenizer_hash=info.tokenizer_hash, tokenizer_uri=info.uri, s3_endpoint=settings.s3_endpoint
    )


@dataclass(frozen=True)
class StageEntry:
    """A pipeline position: the stage class, and how to build it for a dataset (its policy
    decides what the stage keeps)."""

    stage: type[Stage]
    build: StageBuilder
    pool: str = "ray"  # Dagster pool: "neardup" has limit 1, so batches serialise there

    @property
    def name(self) -> str:
        return self.stage.name

    @property
    def description(self) -> str:
        return self.stage.description()


CURATION_STAGES: tuple[StageEntry, ...] = (
    StageEntry(RawStage, _raw),
    StageEntry(
        ExtractStage,
        lambda s, p: ExtractStage(timeout_s=s.extract_timeout_s, extractor=p.extractor),
    ),
    StageEntry(NormalizeStage, lambda s, p: NormalizeStage()),
    StageEntry(
        LanguageStage,
        lambda s, p: LanguageStage(allowed=p.allowed_languages, min_score=p.min_language_score),
    ),
    StageEntry(QualityScoreStage, _quality_scores),
    StageEntry(QualityFilterStage, _quality_filter),
    StageEntry(NearDupStage, lambda s, p: NearDupStage(), pool="neardup"),
    StageEntry(PiiStage, lambda s, p: PiiStage(enabled=p.pii_redaction)),
    StageEntry(DecontaminateStage, _decontaminate),
    StageEntry(TokenizeStage, _tokenize),
)


@dataclass(frozen=True)
class Pipeline:
    """One modality's curation: its stages in order, and how it reads a dataset's policy.

    A modality is a plug-in (docs/architecture.md): landing, quarantine, checks, versions,
    lineage and revocation are the same for every pipeline; the stages and the policy differ.
    """

    modality: str
    stages: tuple[StageEntry, ...]
    load_policy: Callable[[Settings, str], Any]  # (settings, source) -> the source's policy
    policy_from_json: Callable[[str], Any]  # a policy a stage run recorded
    resolve: Callable[[Settings, Any], Any] = lambda settings, policy: policy

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(entry.name for entry in self.stages)

    @property
    def final(self) -> str:
        """The last stage: what a version reads its documents from."""
        return self.stages[-1].name

    @property
    def text_table(self) -> str:
        """The last table holding the text (the caption of a pair): the tokenize stage's input."""
        return self.stages[-2].name

    def upstream_of(self, name: str) -> str | None:
        """The stage whose output feeds `name`; None for the first (it reads landed files)."""
        names = self.names
        index = names.index(name)
        return names[index - 1] if index else None

    def entry(self, name: str) -> StageEntry:
        for item in self.stages:
            if item.name == name:
                return item
        raise KeyError(f"unknown {self.modality} stage {name!r}; stages: {', '.join(self.names)}")


TEXT = Pipeline("text", CURATION_STAGES, load_policy, DatasetPolicy.from_json, resolve_policy)
# The text pipeline's stage names (most of the platform's text-only callers).
STAGE_NAMES: tuple[str, ...] = TEXT.names


def upstream_of(name: str) -> str | None:
    """The text stage whose output feeds `name`; None for the first stage."""
    return TEXT.upstream_of(name)


def entry(name: str) -> StageEntry:
    return TEXT.entry(name)
