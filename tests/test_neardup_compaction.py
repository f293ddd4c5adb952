"""The near-dup index across many batches: small files compacted, detections unchanged, reruns
replacing their own rows inside merged files, and an index written under the old layout
(partitioned by batch and band, shingles on band-0 rows) read, then merged.

Real articles from the shared extraction benchmark go through the stages on Ray up to
`near_deduplicated_documents`, each test on both of the stage's paths (a small batch decided in
one task, and the same batches spread over the cluster); compaction starts at two batches'
small files here (8 files in production), so a few batches exercise it.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from fm_assets.curation.minhash.index import NearDupIndex
from fm_assets.execution import near_dedup_compaction, near_dedup_small, pipeline
from fm_assets.execution.runner import run_stage
from fm_assets.settings import Settings, load_settings
from fm_assets.storage import catalog
from fm_assets.storage.tables import table_spec
from tests.articles import articles_policy, land_articles, long_articles, near_copy

pytestmark = pytest.mark.slow

NEAR_DEDUP = "near_deduplicated_documents"


@dataclass
class Home:
    settings: Settings
    root: Path
    articles: list[tuple[str, str]]
    files_per_batch: int

    def land(self, name: str, records: list[tuple[str, str]]) -> str:
        return land_articles(self.settings, self.root, name, records)

    def through_near_dedup(self, batch_id: str) -> None:
        for stage in pipeline.STAGE_NAMES[: pipeline.STAGE_NAMES.index(NEAR_DEDUP) + 1]:
            run_stage(self.settings, stage, batch_id)

    def policy(self, min_words: int) -> None:
        (self.root / "policies.toml").write_text(articles_policy(min_words))

    def index_rows(self) -> list[dict[str, object]]:
        return catalog.read_table(self.settings, "neardup_index", namespace="cloud").to_pylist()

    def snapshots(self, table: str) -> list[dict[str, str]]:
        loaded = catalog.load_table(self.settings, table, namespace="cloud")
        return [
            {k: s.summary.get(k) for k in ("fm.operation", "fm.batch_id")}
            for s in loaded.metadata.snapshots
            if s.summary is not None
        ]

    def files(self, table: str) -> list[str]:
        loaded = catalog.load_table(self.settings, table, namespace="cloud")
        return [t.file.file_path for t in loaded.scan().plan_files()]


# How many index files (and shingle files) one small batch's run writes: one from the one-task
# path (`near_dedup_small`), one per band group (a group per CPU) when the work is spread.
FILES_PER_BATCH = {"one_task": 1, "spread": 2}


@pytest.fixture(params=sorted(FILES_PER_BATCH))
def home(
    request: pytest.FixtureRequest,
    ray_session: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Home]:
    monkeypatch.setenv("FM_HOME", str(tmp_path / "fm"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "fm" / "dagster"))
    monkeypatch.setenv("FM_POLICY_FILE", str(tmp_path / "policies.toml"))
    if request.param == "spread":
        monkeypatch.setattr(near_dedup_small, "ONE_TASK_ROWS", 0)
    # Two batches' files are enough to merge, on either path.
    monkeypatch.setattr(near_dedup_compaction, "COMPACT_AT", 2 * FILES_PER_BATCH[request.param])
    made = Home(load_settings(), tmp_path, long_articles(20), FILES_PER_BATCH[request.param])
    made.policy(min_words=40)
    yield made


def _quarantined(home: Home, batch_id: str) -> dict[str, str]:
    raw = {
        r["record_id"]: r["external_id"]
        for r in catalog.read_batch(home.settings, "raw_documents", batch_id).to_pylist()
    }
    return {
        str(raw[r["record_id"]]): str(r["reason"])
        for r in catalog.read_batch(home.settings, "quarantine", batch_id).to_pylist()
        if r["rule"] == "near_duplicate"
    }


def _doc_ids(home: Home, table: str, batch_id: str) -> dict[str, str]:
    rows = catalog.read_batch(home.settings, table, batch_id).to_pylist()
    return {str(r["external_id"]): str(r["doc_id"]) for r in rows}


def test_compacted_index_finds_the_copies_and_a_rerun_replaces_its_rows(home: Home) -> None:
    articles = home.articles
    first = home.land("first", articles[:6])
    home.through_near_dedup(first)
    fresh = home.land("fresh", articles[6:8])
    home.through_near_dedup(fresh)
    # Two batches wrote their index files; the third batch's run merges them before reading,
    # then decides its copies against the merged file.
    copies = {f"copy-{k}": k for k, _ in articles[1:4]}
    texts = dict(articles)
    later = home.land(
        "later",
        [(c, near_copy(texts[k], i)) for i, (c, k) in enumerate(copies.items())] + articles[8:10],
    )
    home.through_near_dedup(later)

    compactions = [s for s in home.snapshots("neardup_index") if s.get("fm.operation")]
    assert compactions and compactions[0]["fm.operation"] == "compaction"
    assert [s.get("fm.operation") for s in home.snapshots("neardup_shingles")].count(
        "compaction"
    ) == 1
    first_ids = _doc_ids(home, "raw_documents", first)
    found = _quarantined(home, later)
    assert set(found) == set(copies)
    for copy, original in copies.items():
        assert first_ids[original] in found[copy] and first in found[copy]

    # Every kept document of the three batches is in the index once per band, whatever file
    # holds it; the copies are not.
    bands = home.index_rows()
    per_doc = Counter((r["batch_id"], r["doc_id"]) for r in bands)
    kept = {(b, d) for b in (first, fresh, later) for d in _doc_ids(home, NEAR_DEDUP, b).values()}
    assert set(per_doc) == kept and set(per_doc.values()) == {14}

    # A policy change drops one of the first batch's documents: its near-dup run again
    # removes that document's rows from the merged file and keeps the others exactly once.
    words = {k: len(t.split()) for k, t in articles[:6]}
    shortest = min((k for k in words if k not in copies.values()), key=words.__getitem__)
    home.policy(min_words=words[shortest] + 1)
    dropped_before = set(_doc_ids(home, NEAR_DEDUP, first))
    for stage in ("quality_filtered_documents", NEAR_DEDUP):
        run_stage(home.settings, stage, first)
    kept_first = _doc_ids(home, NEAR_DEDUP, first)
    assert shortest in dropped_before and shortest not in kept_first
    per_doc = Counter((r["batch_id"], r["doc_id"]) for r in home.index_rows())
    assert {d for b, d in per_doc if b == first} == set(kept_first.values())
    assert set(per_doc.values()) == {14}


def test_an_index_of_the_old_layout_is_read_then_merged(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    articles = home.articles
    # An index as older platform versions wrote it: partitioned by batch and band, each
    # document's shingle set on its band-0 row, no `neardup_shingles` rows.
    identifier = catalog.table_identifier(home.settings, "neardup_index", "cloud")
    catalog.load_table(home.settings, "raw_documents", namespace="cloud")  # its namespace
    open_catalog = catalog.open_catalog(home.settings)
    schema = table_spec("neardup_index").schema
    table = open_catalog.create_table(identifier, schema=schema)
    with table.update_spec() as update:  # as the old platform partitioned a new table
        update.add_identity("batch_id")
        update.add_identity("band")
    old_texts = dict(articles[:4])
    old_ids = {k: hashlib.sha256(t.encode()).hexdigest() for k, t in old_texts.items()}
    index = NearDupIndex()
    index.find_duplicates(list(old_ids.values()), list(old_texts.values()))
    rows = index.new_index_rows()
    rows = rows.add_column(0, "batch_id", pa.array(["b-old"] * rows.num_rows, pa.string()))
    table.append(rows.cast(schema))
    assert len(home.files("neardup_index")) == 14  # one file per band

    copies = {f"copy-{k}": k for k, _ in articles[:2]}
    batch = home.land(
        "after-upgrade",
        [(c, near_copy(old_texts[k], i)) for i, (c, k) in enumerate(copies.items())]
        + articles[10:12],
    )
    monkeypatch.setattr(near_dedup_compaction, "COMPACT_AT", 100)  # read the old files as such
    home.through_near_dedup(batch)

    found = _quarantined(home, batch)
    assert set(found) == set(copies)
    for copy, original in copies.items():
        assert old_ids[original] in found[copy]
    assert len(home.files("neardup_index")) == 14 + home.files_per_batch  # and the new batch's

    # The next batch's run merges the old files with the new: the index lists the old batch's
    # rows and the new batches', in files of the unpartitioned layout, and finds copies of both.
    monkeypatch.setattr(near_dedup_compaction, "COMPACT_AT", 3)  # the old 14 and the new
    new_ids = _doc_ids(home, "raw_documents", batch)
    again = home.land(
        "next",
        [
            ("copy-again-old", near_copy(old_texts[articles[3][0]], 7)),
            ("copy-again-new", near_copy(dict(articles)[articles[10][0]], 8)),
        ],
    )
    home.through_near_dedup(again)
    found = _quarantined(home, again)
    assert old_ids[articles[3][0]] in found["copy-again-old"]
    assert new_ids[articles[10][0]] in found["copy-again-new"]
    loaded = catalog.load_table(home.settings, "neardup_index", namespace="cloud")
    assert not loaded.spec().fields
    specs = {t.file.spec_id for t in loaded.scan().plan_files()}
    assert specs == {loaded.spec().spec_id}
    per_doc = Counter((r["batch_id"], r["doc_id"]) for r in home.index_rows())
    new_kept = set(_doc_ids(home, NEAR_DEDUP, batch).values())
    assert not _doc_ids(home, NEAR_DEDUP, again)  # both were copies
    assert set(per_doc) == {("b-old", d) for d in old_ids.values()} | {(batch, d) for d in new_kept}
    assert set(per_doc.values()) == {14}
