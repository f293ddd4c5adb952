"""Every modality's pipeline, and which one a batch, a stage or a version goes through.

A batch's modality is in its landing manifest (`fm land` detects it from the files); a stage
belongs to exactly one pipeline (stage names are table names, unique across modalities).
"""

from __future__ import annotations

from fm_assets.execution.image_text_pipeline import IMAGE_TEXT
from fm_assets.execution.pipeline import TEXT, Pipeline, StageEntry
from fm_assets.settings import Settings
from fm_assets.storage.landing import read_manifest
from fm_assets.storage.objectstore import open_object_store

PIPELINES: dict[str, Pipeline] = {p.modality: p for p in (TEXT, IMAGE_TEXT)}
# Every stage of every modality, each modality's in order.
ALL_STAGES: tuple[StageEntry, ...] = tuple(e for p in PIPELINES.values() for e in p.stages)
ALL_STAGE_NAMES: tuple[str, ...] = tuple(e.name for e in ALL_STAGES)


def pipeline_for(modality: str) -> Pipeline:
    try:
        return PIPELINES[modality]
    except KeyError:
        raise ValueError(
            f"unknown modality {modality!r}; this fm curates {', '.join(PIPELINES)}"
        ) from None


def pipeline_of_stage(stage: str) -> Pipeline:
    """The pipeline holding stage `stage`."""
    for pipeline in PIPELINES.values():
        if stage in pipeline.names:
            return pipeline
    raise KeyError(f"unknown stage {stage!r}; stages: {', '.join(ALL_STAGE_NAMES)}")


def pipeline_of_batch(settings: Settings, batch_id: str) -> Pipeline:
    """The pipeline of a landing batch's modality (from its manifest)."""
    return pipeline_for(read_manifest(open_object_store(settings), batch_id).modality)


def upstream_of(stage: str) -> str | None:
    """The stage whose output feeds `stage`, in its own pipeline; None for a first stage."""
    return pipeline_of_stage(stage).upstream_of(stage)


def entry(stage: str) -> StageEntry:
    return pipeline_of_stage(stage).entry(stage)
