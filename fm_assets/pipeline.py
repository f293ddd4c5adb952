"""The curation pipeline: the ordered stages every landing batch goes through.

Inserting a stage (language ID, quality filters, near-dedup, PII, decontamination) is a local
change: write the Stage class, add its table to `storage.catalog.TABLES`, and add one line here.
The Dagster assets, checks, CLI and runner all follow this list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fm_assets.policy import DatasetPolicy
from fm_assets.settings import Settings
from fm_assets.stages.base import Stage
from fm_assets.stages.decontaminate import DecontaminateStage
from fm_assets.stages.extract import ExtractStage
from fm_assets.stages.language import LanguageStage
from fm_assets.stages.neardup import NearDupStage
from fm_assets.stages.normalize import NormalizeStage
from fm_assets.stages.pii import PiiStage
from fm_assets.stages.quality import QualityFilterStage, QualityScoreStage, thresholds_json
from fm_assets.stages.raw import RawStage
from fm_assets.stages.tokenize import TokenizeStage


def _quality_scores(settings: Settings, policy: DatasetPolicy) -> Stage:
    if policy.classifier_sha256 is None:
        return QualityScoreStage()
    from fm_assets.classifier_registry import require_classifier

    info = require_classifier(settings, policy.classifier_sha256)
    return QualityScoreStage(
        classifier_sha256=info.model_sha256,
        classifier_uri=info.uri,
        s3_endpoint=settings.s3_endpoint,
    )


def _decontaminate(settings: Settings, policy: DatasetPolicy) -> Stage:
    from fm_assets.contamination.registry import CONTAMINATION_RULES_VERSION
    from fm_assets.contamination.store import registry_ref

    return DecontaminateStage(
        registry=registry_ref(settings),
        mode=policy.decontamination,
        rules_version=CONTAMINATION_RULES_VERSION,
        settings=settings,
    )


def _tokenize(settings: Settings, policy: DatasetPolicy) -> Stage:
    from fm_assets.tokenizer_registry import default_tokenizer

    info = default_tokenizer(settings)
    return TokenizeStage(
        tokenizer_hash=info.tokenizer_hash, tokenizer_uri=info.uri, s3_endpoint=settings.s3_endpoint
    )


@dataclass(frozen=True)
class StageEntry:
    """A pipeline position: the stage's name (= its output table and asset) and how to build it
    for a dataset (its policy decides what the stage keeps)."""

    name: str
    build: Callable[[Settings, DatasetPolicy], Stage]
    description: str
    pool: str = "ray"  # Dagster pool: "neardup" has limit 1, so batches serialise there


CURATION_STAGES: tuple[StageEntry, ...] = (
    StageEntry(
        "raw_documents",
        lambda s, p: RawStage(max_document_bytes=s.max_document_bytes, s3_endpoint=s.s3_endpoint),
        "Parsed, validated, content-addressed records; exact duplicates quarantined.",
    ),
    StageEntry(
        "extracted_documents",
        lambda s, p: ExtractStage(timeout_s=s.extract_timeout_s),
        "Main text of HTML pages (trafilatura, per-document timeout); text passes through.",
    ),
    StageEntry(
        "normalized_documents",
        lambda s, p: NormalizeStage(),
        "Unicode NFC and whitespace normalisation.",
    ),
    StageEntry(
        "language_tagged_documents",
        lambda s, p: LanguageStage(allowed=p.allowed_languages, min_score=p.min_language_score),
        "fastText lid.176 language and score; languages the dataset does not allow quarantined.",
    ),
    StageEntry(
        "quality_scored_documents",
        _quality_scores,
        "Gopher/C4/FineWeb quality scores and the registered classifier's score, as columns.",
    ),
    StageEntry(
        "quality_filtered_documents",
        lambda s, p: QualityFilterStage(
            thresholds_json=thresholds_json(p.thresholds()),
            min_classifier_score=p.min_classifier_score,
        ),
        "The dataset's quality thresholds applied to the stored scores (no rescoring).",
    ),
    StageEntry(
        "near_deduplicated_documents",
        lambda s, p: NearDupStage(),
        "MinHash LSH (14x8 bands, exact Jaccard >= 0.8) against every batch's kept documents.",
        pool="neardup",
    ),
    StageEntry(
        "pii_redacted_documents",
        lambda s, p: PiiStage(enabled=p.pii_redaction),
        "Emails, phones, public IPs and card numbers replaced by tokens; audit in pii_redactions.",
    ),
    StageEntry(
        "decontaminated_documents",
        _decontaminate,
        "Documents holding a registered eval item (n-gram overlap, numbers masked) dropped or "
        "redacted; mandatory before tokenization.",
    ),
    StageEntry(
        "tokenized_documents",
        _tokenize,
        "Token ids from the registered default tokenizer, EOS appended.",
    ),
)

STAGE_NAMES: tuple[str, ...] = tuple(entry.name for entry in CURATION_STAGES)


def upstream_of(name: str) -> str | None:
    """The stage whose output feeds `name`; None for the first stage (it reads landed files)."""
    index = STAGE_NAMES.index(name)
    return STAGE_NAMES[index - 1] if index else None


def entry(name: str) -> StageEntry:
    for item in CURATION_STAGES:
        if item.name == name:
            return item
    raise KeyError(f"unknown stage {name!r}; stages: {', '.join(STAGE_NAMES)}")
