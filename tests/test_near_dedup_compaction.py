"""The near-dup index across many batches: small files compacted, detections unchanged, reruns
replacing their own rows inside merged files; an index written under the old layout
(partitioned by batch and band, shingles on band-0 rows) read, then merged; and the shingle sets
older versions kept in a table of their own (`neardup_shingles`) moved into the index.

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

from fm_assets.curation.minhash.index import (
    SHINGLE_SETS_IN_INDEX,
    SHINGLE_SETS_PROPERTY,
    NearDupIndex,
)
from fm_assets.execution import pipeline
from fm_assets.execution.near_dedup import compaction as near_dedup_compaction
from fm_assets.execution.near_dedup import one_task as near_dedup_small
from fm_assets.execution.near_dedup.migration import LEGACY_SCHEMA, LEGACY_TABLE
from fm_assets.execution.runner import run_stage
from fm_assets.settings import Settings, load_settings
from fm_assets.storage import catalog, data_files
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
        """The index's band-hash rows."""
        rows = catalog.read_table(self.settings, "neardup_index", namespace="cloud").to_pylist()
        return [r for r in rows if int(str(r["band"])) >= 0]

    def shingle_set_rows(self) -> list[dict[str, object]]:
        rows = catalog.read_table(self.settings, "neardup_index", namespace="cloud").to_pylist()
        return [r for r in rows if int(str(r["band"])) < 0]

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

    def band_files(self) -> list[str]:
        """The index's files holding band-hash rows (by their band statistics)."""
        handle = data_files.table_handle(self.settings, "neardup_index", "cloud")
        return [
            t.file.file_path
            for t in data_files.plan_handle(handle)
            if (data_files.value_range(handle, t, "band") or (0, 0))[1] >= 0
        ]


# How many index files holding band rows one small batch's run writes: one from the one-task
# path (`near_dedup.one_task`, its shingle sets in the same file), one per band group (a group per
# CPU) when the work is spread (its shingle sets in files of their own, a bucket group's each).
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
    # Two batches' runs are enough to merge, on either path.
    monkeypatch.setattr(near_dedup_compaction, "MERGE_AT", 2)
    monkeypatch.setattr(near_dedup_compaction, "CHECK_AT", 2)
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
    assert compactions and {s["fm.operation"] for s in compactions} == {"compaction"}
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
    sets = Counter((r["batch_id"], r["doc_id"]) for r in home.shingle_set_rows())
    assert set(sets) == kept and set(sets.values()) == {1}

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
    sets = Counter((r["batch_id"], r["doc_id"]) for r in home.shingle_set_rows())
    assert set(sets) == set(per_doc) and set(sets.values()) == {1}


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
    monkeypatch.setattr(near_dedup_compaction, "CHECK_AT", 100)  # read the old files as such
    home.through_near_dedup(batch)

    found = _quarantined(home, batch)
    assert set(found) == set(copies)
    for copy, original in copies.items():
        assert old_ids[original] in found[copy]
    assert len(home.band_files()) == 14 + home.files_per_batch  # and the new batch's
    # The index, made by an old version, now says where its shingle sets are.
    properties = catalog.load_table(home.settings, "neardup_index", namespace="cloud").properties
    assert properties[SHINGLE_SETS_PROPERTY] == SHINGLE_SETS_IN_INDEX

    # The next batch's run merges the old files with the new: the index lists the old batch's
    # rows and the new batches', in files of the unpartitioned layout, and finds copies of both.
    monkeypatch.setattr(near_dedup_compaction, "CHECK_AT", 3)  # the old 14 and the new
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


def test_shingle_sets_of_an_older_version_table_are_moved_into_the_index(home: Home) -> None:
    articles = home.articles
    first = home.land("first", articles[:6])
    home.through_near_dedup(first)
    # Make the namespace what the versions before wrote: the shingle sets as rows of their own
    # `neardup_shingles` table (batch_id, bucket, doc_id, shingle_hashes), none in the index,
    # and an index table without the property that says where they are.
    moved = home.shingle_set_rows()
    assert moved, "the first batch indexed no shingle set"
    identifier = f"{catalog.catalog_namespace(home.settings, 'cloud')}.{LEGACY_TABLE}"
    legacy = catalog.open_catalog(home.settings).create_table(identifier, schema=LEGACY_SCHEMA)
    legacy.append(
        pa.table(
            {
                "batch_id": [r["batch_id"] for r in moved],
                "bucket": [-1 - int(str(r["band"])) for r in moved],
                "doc_id": [r["doc_id"] for r in moved],
                "shingle_hashes": [r["shingle_hashes"] for r in moved],
            },
            schema=LEGACY_SCHEMA,
        )
    )
    index = catalog.load_table(home.settings, "neardup_index", namespace="cloud")
    index.delete("band < 0")
    with index.transaction() as tx:
        tx.remove_properties(SHINGLE_SETS_PROPERTY)
    assert not home.shingle_set_rows()

    # Copies of the first batch need its shingle sets to be confirmed: the run moves them in.
    copies = {f"copy-{k}": k for k, _ in articles[1:3]}
    texts = dict(articles)
    later = home.land(
        "later", [(c, near_copy(texts[k], i)) for i, (c, k) in enumerate(copies.items())]
    )
    home.through_near_dedup(later)
    first_ids = _doc_ids(home, "raw_documents", first)
    found = _quarantined(home, later)
    assert set(found) == set(copies)
    for copy, original in copies.items():
        assert first_ids[original] in found[copy]

    assert not catalog.open_catalog(home.settings).table_exists(identifier)
    loaded = catalog.load_table(home.settings, "neardup_index", namespace="cloud")
    assert loaded.properties[SHINGLE_SETS_PROPERTY] == SHINGLE_SETS_IN_INDEX
    as_moved = sorted((r["batch_id"], r["doc_id"], r["band"], r["shingle_hashes"]) for r in moved)
    now = sorted(
        (r["batch_id"], r["doc_id"], r["band"], r["shingle_hashes"])
        for r in home.shingle_set_rows()
    )
    assert now == as_moved  # the second batch kept nothing: both were copies
    assert [s["fm.operation"] for s in home.snapshots("neardup_index")].count(
        "shingle-sets-moved"
    ) == 1
