"""The curation pipeline: the ordered stages every landing batch goes through.

Inserting a stage (language ID, quality filters, near-dedup, PII, decontamination) is a local
change: write the Stage class, add its table to `storage.catalog.TABLES`, and add one line here.
The Dagster assets, checks, CLI and runner all follow this list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fm_assets.settings import Settings
from fm_assets.stages.base import Stage
from fm_assets.stages.extract import ExtractStage
from fm_assets.stages.normalize import NormalizeStage
from fm_assets.stages.raw import RawStage
from fm_assets.stages.tokenize import TokenizeStage


def _tokenize(settings: Settings) -> Stage:
    from fm_assets.tokenizer_registry import default_tokenizer

    info = default_tokenizer(settings)
    return TokenizeStage(
        tokenizer_hash=info.tokenizer_hash, tokenizer_uri=info.uri, s3_endpoint=settings.s3_endpoint
    )


@dataclass(frozen=True)
class StageEntry:
    """A pipeline position: the stage's name (= its output table and asset) and how to build it."""

    name: str
    build: Callable[[Settings], Stage]
    description: str


CURATION_STAGES: tuple[StageEntry, ...] = (
    StageEntry(
        "raw_documents",
        lambda s: RawStage(max_document_bytes=s.max_document_bytes, s3_endpoint=s.s3_endpoint),
        "Parsed, validated, content-addressed records; exact duplicates quarantined.",
    ),
    StageEntry(
        "extracted_documents",
        lambda s: ExtractStage(timeout_s=s.extract_timeout_s),
        "Main text of HTML pages (trafilatura, per-document timeout); text passes through.",
    ),
    StageEntry(
        "normalized_documents",
        lambda s: NormalizeStage(),
        "Unicode NFC and whitespace normalisation.",
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
