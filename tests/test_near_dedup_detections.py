"""Near dedup across batches of one namespace decides what the in-memory reference decides.

`NearDupIndex` (`curation/minhash/index.py`) holds the whole index in memory and decides each
batch in order: the definition of a detection. The stage reads only the index rows a batch
needs, from files merged as the index grows; on the same batches it must quarantine the same
documents as copies of the same partners, with the same Jaccard, and keep the rest.

Real texts: the Clough-Stevenson corpus (five Wikipedia sources and 95 answers, some cut from
them) and articles of the shared extraction benchmark, landed over five batches, with edited
copies of documents of earlier batches and of the same batch. Each path of the stage (one task
on a small batch, spread over the cluster) runs them in a home of its own, with the index's
files merged after every other batch, so later batches read merged and unmerged files alike.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fm_assets.curation.minhash.index import NearDupIndex
from fm_assets.execution import pipeline
from fm_assets.execution.near_dedup import compaction
from fm_assets.execution.near_dedup import one_task as near_dedup_one_task
from fm_assets.execution.runner import run_stage
from fm_assets.settings import Settings, load_settings
from fm_assets.storage import catalog, data_files
from tests.articles import articles_policy, land_articles, long_articles, near_copy
from tests.paths import SHARED_DATA

pytestmark = pytest.mark.slow

NEAR_DEDUP = "near_deduplicated_documents"
UPSTREAM = "quality_filtered_documents"
CLOUGH = SHARED_DATA / "neardup" / "clough-stevenson"
REASON = re.compile(
    r"near-duplicate of kept document (\S+) \(batch (\S+)\): shingle Jaccard (\S+) >= \S+"
)


def _clough() -> list[tuple[str, str]]:
    """(file name, text) of the corpus: the five sources first, then the answers."""
    with (CLOUGH / "file_information.csv").open(newline="") as f:
        answers = [row["File"] for row in csv.DictReader(f) if row["Category"] != "orig"]

    def read(name: str) -> str:
        data = (CLOUGH / name).read_bytes()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return data.decode("cp1252", errors="replace")

    names = [f"orig_task{t}.txt" for t in "abcde"] + sorted(answers)
    return [(n, read(n)) for n in names]


def _batches() -> list[list[tuple[str, str]]]:
    """Five batches of (external id, text): corpus texts and articles, and edited copies of
    earlier batches' texts and of texts of their own batch."""
    clough, articles = _clough(), long_articles(16)
    texts = dict(clough + articles)

    def copies(keys: list[str], seed: int) -> list[tuple[str, str]]:
        return [(f"copy{seed}-{k}", near_copy(texts[k], seed + i)) for i, k in enumerate(keys)]

    a, b, c = clough[:35], clough[35:70], clough[70:]
    first = a + articles[:6]
    second = b + copies([k for k, _ in a[:5]] + [articles[0][0]], 1)
    third = c + articles[6:10] + copies([b[3][0], c[0][0], articles[7][0]], 2)
    fourth = articles[10:14] + copies([a[2][0], b[5][0], articles[2][0], articles[8][0]], 3)
    fifth = articles[14:] + copies([c[4][0], articles[11][0], a[3][0]], 4)
    return [first, second, third, fourth, fifth]


def _batch_rows(settings: Settings, batch_id: str) -> tuple[list[str], list[str]]:
    """(doc ids, texts) near dedup reads for `batch_id`, in the order it reads them: the
    upstream partition's data files in path order (`planning.table_slices`), rows in order."""
    where = catalog.where_equal("batch_id", batch_id)
    files = data_files.plan_files(settings, UPSTREAM, where, None, "cloud")
    ids: list[str] = []
    texts: list[str] = []
    for task in sorted(files, key=lambda t: t.file.file_path):
        table = pq.read_table(
            task.file.file_path.removeprefix("file://"), columns=["doc_id", "text"]
        )
        ids += table.column("doc_id").to_pylist()
        texts += table.column("text").to_pylist()
    return ids, texts


def _run(root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, object], int]:
    """Land and decide the five batches in a new home; return each document's verdict as the
    reference decides it and as the stage did (must be equal), and the compactions made."""
    root.mkdir()
    (root / "policies.toml").write_text(articles_policy())
    for key, value in {
        "FM_HOME": str(root / "fm"),
        "DAGSTER_HOME": str(root / "fm" / "dagster"),
        "FM_POLICY_FILE": str(root / "policies.toml"),
    }.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    reference = NearDupIndex()
    expected: dict[str, object] = {}
    decided: dict[str, object] = {}
    stages = pipeline.STAGE_NAMES[: pipeline.STAGE_NAMES.index(NEAR_DEDUP) + 1]
    for n, records in enumerate(_batches()):
        batch = land_articles(settings, root, f"batch-{n}", records)
        for stage in stages:
            run_stage(settings, stage, batch)
        ids, texts = _batch_rows(settings, batch)
        for doc, decision in zip(ids, reference.find_duplicates(ids, texts), strict=True):
            expected[doc] = (
                (decision.duplicate_of, round(decision.jaccard, 3))
                if decision.is_duplicate
                else "kept"
            )
        for row in catalog.read_batch(settings, NEAR_DEDUP, batch).to_pylist():
            decided[str(row["doc_id"])] = "kept"
        for row in catalog.read_batch(settings, "quarantine", batch).to_pylist():
            if row["stage"] == NEAR_DEDUP:
                found = REASON.fullmatch(str(row["reason"]))
                assert found, row["reason"]
                decided[str(row["doc_id"])] = (found[1], float(found[3]))
    assert decided == expected
    loaded = catalog.load_table(settings, "neardup_index", namespace="cloud")
    merges = sum(
        1
        for s in loaded.metadata.snapshots
        if s.summary is not None and s.summary.get("fm.operation") == "compaction"
    )
    return expected, merges


@pytest.mark.parametrize("path", ["one task", "spread"])
def test_the_stage_decides_as_the_in_memory_reference(
    path: str, ray_session: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if path == "spread":
        monkeypatch.setattr(near_dedup_one_task, "ONE_TASK_ROWS", 0)
    # Runs merge two at a time (four in production), so every later batch reads merged runs.
    monkeypatch.setattr(compaction, "MERGE_AT", 2)
    monkeypatch.setattr(compaction, "CHECK_AT", 2)
    expected, merges = _run(tmp_path / "home", monkeypatch)
    duplicates = [v for v in expected.values() if v != "kept"]
    # The batches hold 20 edited copies (a few of the Clough-Stevenson answers, and so their
    # copies, do not pass the quality rules), and the corpus' own near-copies of its sources.
    assert len(duplicates) >= 15, duplicates
    assert merges >= 1
