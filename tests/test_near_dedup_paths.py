"""The near-dup stage decides a small batch in one Ray task (`near_dedup.one_task`) and a larger
one spread over the cluster (`near_dedup.run`). On the same batches both paths quarantine the same
documents as copies of the same partners, keep the same documents and write the same index
rows and shingle sets; a batch over the one-task limit takes the spread path.

Real articles from the shared extraction benchmark go through the stages on Ray: a first batch,
then one holding near-copies of it, a copy of one of its own documents and new documents.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fm_assets.execution import pipeline
from fm_assets.execution.near_dedup import one_task as near_dedup_small
from fm_assets.execution.near_dedup import run as near_dedup
from fm_assets.execution.near_dedup.tasks import shingle_bucket
from fm_assets.execution.runner import run_stage
from fm_assets.settings import load_settings
from fm_assets.storage import catalog
from tests.articles import articles_policy, land_articles, long_articles, near_copy

pytestmark = pytest.mark.slow

NEAR_DEDUP = "near_deduplicated_documents"


@dataclass(frozen=True)
class Decided:
    """What the near-dup stage decided and wrote for the two batches, in comparable form."""

    quarantined: list[tuple[str, str, str, str]]  # batch, document, rule, reason
    kept: list[tuple[str, str]]  # batch, document
    index: list[tuple[str, str, int, int]]  # batch, document, band, band hash
    # batch, document, whether under its bucket's band, shingle set
    shingles: list[tuple[str, str, bool, tuple[int, ...]]]


def _decide(root: Path, monkeypatch: pytest.MonkeyPatch) -> Decided:
    """Land the two batches in a new FM_HOME under `root`, run both through near dedup; return
    what the near-dup stage decided and wrote, with batch and document ids as external ids."""
    root.mkdir()
    (root / "policies.toml").write_text(articles_policy())
    env = {
        "FM_HOME": str(root / "fm"),
        "DAGSTER_HOME": str(root / "fm" / "dagster"),
        "FM_POLICY_FILE": str(root / "policies.toml"),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    articles = long_articles(14)
    texts = dict(articles)
    first = articles[:6]
    second = [
        *[(f"copy-{k}", near_copy(texts[k], i)) for i, (k, _) in enumerate(first[1:4])],
        *articles[6:12],
        ("copy-of-new", near_copy(texts[articles[7][0]], 9)),  # a copy inside its own batch
    ]
    batches = [
        land_articles(settings, root, "a", first),
        land_articles(settings, root, "b", second),
    ]
    for batch in batches:
        for stage in pipeline.STAGE_NAMES[: pipeline.STAGE_NAMES.index(NEAR_DEDUP) + 1]:
            run_stage(settings, stage, batch)
    names = {b: f"batch-{i}" for i, b in enumerate(batches)}
    external: dict[str, str] = {}
    for batch in batches:
        for row in catalog.read_batch(settings, "raw_documents", batch).to_pylist():
            external[str(row["doc_id"])] = str(row["external_id"])

    def readable(text: str) -> str:
        for raw, name in [*names.items(), *external.items()]:
            text = text.replace(raw, name)
        return text

    quarantined = sorted(
        (names[b], readable(str(r["doc_id"])), str(r["rule"]), readable(str(r["reason"])))
        for b in batches
        for r in catalog.read_batch(settings, "quarantine", b).to_pylist()
        if r["stage"] == NEAR_DEDUP
    )
    kept = sorted(
        (names[b], external[str(r["doc_id"])])
        for b in batches
        for r in catalog.read_batch(settings, NEAR_DEDUP, b).to_pylist()
    )
    rows = catalog.read_table(settings, "neardup_index", namespace="cloud").to_pylist()
    index = sorted(
        (names[str(r["batch_id"])], external[str(r["doc_id"])], r["band"], r["band_hash"])
        for r in rows
        if r["band"] >= 0
    )
    # A kept document's shingle set is one index row, under the band of its id's bucket.
    shingles = sorted(
        (
            names[str(r["batch_id"])],
            external[str(r["doc_id"])],
            r["band"] == -1 - shingle_bucket(str(r["doc_id"])),
            tuple(r["shingle_hashes"]),
        )
        for r in rows
        if r["band"] < 0
    )
    return Decided(quarantined, kept, index, shingles)


def test_one_task_and_spread_paths_decide_and_index_alike(
    ray_session: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths_taken: list[str] = []
    decided_in_one_task = near_dedup.decided_in_one_task

    def recording(*args: Any) -> bool:
        taken = decided_in_one_task(*args)
        paths_taken.append("one_task" if taken else "spread")
        return taken

    monkeypatch.setattr(near_dedup, "decided_in_one_task", recording)
    one_task = _decide(tmp_path / "one-task", monkeypatch)
    monkeypatch.setattr(near_dedup_small, "ONE_TASK_ROWS", 7)  # the 10-document one spreads
    mixed = _decide(tmp_path / "mixed", monkeypatch)
    monkeypatch.setattr(near_dedup_small, "ONE_TASK_ROWS", 0)
    spread = _decide(tmp_path / "spread", monkeypatch)
    assert paths_taken == ["one_task", "one_task", "one_task", "spread", "spread", "spread"], (
        f"paths taken: {paths_taken}"
    )

    # What a user sees: the three copies of the first batch and the copy inside the second.
    first = long_articles(14)[:6]
    assert [(b, d) for b, d, _, _ in one_task.quarantined] == sorted(
        [("batch-1", f"copy-{k}") for k, _ in first[1:4]] + [("batch-1", "copy-of-new")]
    )
    # The rest of the second batch (the new articles the language and quality stages kept) is
    # kept; every kept document is indexed, and nothing else.
    new_articles = {k for k, _ in long_articles(14)[6:12]}
    kept_new = {d for b, d in one_task.kept if b == "batch-1"}
    assert kept_new <= new_articles and len(kept_new) >= 4, kept_new
    assert {(b, d) for b, d, _, _ in one_task.index} == set(one_task.kept)
    assert sorted((b, d, in_bucket) for b, d, in_bucket, _ in one_task.shingles) == sorted(
        (b, d, True) for b, d in one_task.kept
    )
    assert one_task == spread, "the one-task path decided or indexed otherwise than the spread"
    assert mixed == spread
