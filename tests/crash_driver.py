"""The process the crash tests kill: every stage of one batch, then its version and shard set.

    python -m tests.crash_driver BATCH_ID TOKENIZER_PATH SEQ_LEN     (FM_HOME etc. from the env)

It calls what a Dagster run of the batch calls (`run_stage` per stage, then the version cut and
the shard-set build), without Dagster's start-up, so a test can kill it at many points of every
stage in little time. Before and after each step it prints `fm-crash: start STEP` / `end STEP`
on stdout, flushed, and `progress STEP` for each progress message of the step (planning, Ray
tasks done, ...): how the killer picks its moment.
"""

from __future__ import annotations

import sys

from fm_assets.execution import pipeline
from fm_assets.execution.runner import run_stage
from fm_assets.registries.tokenizers import resolve_tokenizer
from fm_assets.settings import load_settings
from fm_assets.shards.build import build_shard_set
from fm_assets.versions.dataset_version import create_version

VERSION_KEY = "web@v1"
STEPS = (*pipeline.STAGE_NAMES, "dataset_version", "shard_set")


def _mark(event: str, step: str) -> None:
    print(f"fm-crash: {event} {step}", flush=True)


def main(batch_id: str, tokenizer: str, seq_len: int) -> None:
    settings = load_settings()
    for stage in pipeline.STAGE_NAMES:
        _mark("start", stage)
        run_stage(settings, stage, batch_id, progress=lambda message, s=stage: _mark("progress", s))
        _mark("end", stage)
    _mark("start", "dataset_version")
    create_version(settings, VERSION_KEY, [batch_id], run_id=None)
    _mark("end", "dataset_version")
    _mark("start", "shard_set")
    build_shard_set(
        settings,
        VERSION_KEY,
        resolve_tokenizer(settings, tokenizer),
        seq_len,
        progress=lambda message: _mark("progress", "shard_set"),
    )
    _mark("end", "shard_set")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
