"""The image-text pipeline: the ordered stages every image-text landing batch goes through, and
how each is built from the dataset's image-text policy."""

from __future__ import annotations

from fm_assets.contamination.registry import CONTAMINATION_RULES_VERSION
from fm_assets.contamination.store import registry_ref
from fm_assets.curation.image_text_policy import (
    ImageTextPolicy,
    image_text_policy_from_json,
    load_image_text_policy,
)
from fm_assets.execution.pipeline import Pipeline, StageEntry
from fm_assets.registries.tokenizers import default_tokenizer
from fm_assets.settings import Settings
from fm_assets.stages.base import Stage
from fm_assets.stages.image_text.captions import (
    CaptionDecontaminateStage,
    CaptionPiiStage,
    CaptionTokenizeStage,
)
from fm_assets.stages.image_text.decode import DecodeStage
from fm_assets.stages.image_text.dedup import ImageDedupStage
from fm_assets.stages.image_text.filter import PairFilterStage
from fm_assets.stages.image_text.raw import RawPairsStage
from fm_assets.stages.image_text.score import ScoreStage
from fm_assets.storage.landing import IMAGE_TEXT_MODALITY


def _raw(settings: Settings, policy: ImageTextPolicy) -> Stage:
    return RawPairsStage(
        max_document_bytes=settings.max_document_bytes, s3_endpoint=settings.s3_endpoint
    )


def _filter(settings: Settings, p: ImageTextPolicy) -> Stage:
    return PairFilterStage(
        min_side=p.min_side,
        max_aspect_ratio=p.max_aspect_ratio,
        min_caption_chars=p.min_caption_chars,
        min_caption_words=p.min_caption_words,
        max_caption_chars=p.max_caption_chars,
        caption_languages=p.caption_languages,
        min_caption_language_score=p.min_caption_language_score,
        drop_boilerplate_captions=p.drop_boilerplate_captions,
    )


def _score(settings: Settings, policy: ImageTextPolicy) -> Stage:
    from fm_assets.curation.images.scorers import model_digest

    digests = tuple(model_digest(spec.path) for spec in policy.scorers)
    return ScoreStage(scorers=policy.scorers, model_digests=digests)


def _decontaminate(settings: Settings, policy: ImageTextPolicy) -> Stage:
    return CaptionDecontaminateStage(
        registry=registry_ref(settings),
        mode=policy.decontamination,
        rules_version=CONTAMINATION_RULES_VERSION,
        settings=settings,
    )


def _tokenize(settings: Settings, policy: ImageTextPolicy) -> Stage:
    info = default_tokenizer(settings)
    return CaptionTokenizeStage(
        tokenizer_hash=info.tokenizer_hash, tokenizer_uri=info.uri, s3_endpoint=settings.s3_endpoint
    )


IMAGE_TEXT_STAGES: tuple[StageEntry, ...] = (
    StageEntry(RawPairsStage, _raw),
    StageEntry(DecodeStage, lambda s, p: DecodeStage(max_pixels=p.max_pixels, resize=p.resize)),
    StageEntry(PairFilterStage, _filter),
    StageEntry(
        ImageDedupStage,
        lambda s, p: ImageDedupStage(max_distance=p.near_dup_max_distance),
        pool="neardup",
    ),
    StageEntry(ScoreStage, _score),
    StageEntry(CaptionPiiStage, lambda s, p: CaptionPiiStage(enabled=p.pii_redaction)),
    StageEntry(CaptionDecontaminateStage, _decontaminate),
    StageEntry(CaptionTokenizeStage, _tokenize),
)

IMAGE_TEXT = Pipeline(
    IMAGE_TEXT_MODALITY, IMAGE_TEXT_STAGES, load_image_text_policy, image_text_policy_from_json
)
