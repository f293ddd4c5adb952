"""A near-dup index growing run by run, compacted after each run as the stage does
(`execution/near_dedup/compaction.py`): every lookup answers the same rows before and after
each compaction, no row is lost or doubled, and the runs a key may be in stay within the size
tiers' bound (so what a batch reads grows with the log of the index, not with it).

Synthetic rows, written with the stage's own writer into a fresh FM_HOME's catalog; the
compaction's jobs run in this process (no Ray), with tiers and files scaled down so that a few
dozen small runs climb several tiers and merged runs span several files.
"""

from __future__ import annotations

import math
import uuid
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from fm_assets.execution import pipeline  # noqa: F401  (declares the stage tables)
from fm_assets.execution.near_dedup import compaction, layout, lookup, merge
from fm_assets.settings import Settings
from fm_assets.storage import catalog, data_files

NS = "cloud"
BANDS = 14
RUNS = 30
DOCS = 40  # a run's documents


def _run_rows(rng: np.random.Generator, batch_id: str) -> tuple[pa.Table, pa.Table]:
    ids = [f"{x:016x}-{batch_id}" for x in rng.integers(0, 2**62, DOCS)]
    hashes = rng.integers(-(2**63), 2**63 - 1, (DOCS, BANDS), dtype=np.int64)
    bands = pa.table(
        {
            "batch_id": [batch_id] * (DOCS * BANDS),
            "doc_id": np.repeat(np.array(ids, dtype=object), BANDS).tolist(),
            "band": pa.array(np.tile(np.arange(BANDS, dtype=np.int32), DOCS)),
            "band_hash": hashes.reshape(-1),
            "index_config": ["test"] * (DOCS * BANDS),
        }
    )
    sets = pa.table(
        {
            "batch_id": [batch_id] * DOCS,
            "doc_id": ids,
            "band": pa.array([-1 - int(d[8:16], 16) % 16 for d in ids], pa.int32()),
            "band_hash": np.zeros(DOCS, np.int64),
            "shingle_hashes": [sorted(rng.integers(0, 2**62, 20).tolist()) for _ in ids],
            "index_config": ["test"] * DOCS,
        }
    )
    return bands, sets


def _answers(settings: Settings, keys: dict[str, pa.Array]) -> dict[str, list[tuple[str, ...]]]:
    """Every lookup's rows, in a stable order."""
    handle = data_files.table_handle(settings, "neardup_index", NS)
    files = data_files.plan_handle(handle)
    found = {}
    for kind, wanted in keys.items():
        key = layout.KEY[kind]
        columns = tuple(dict.fromkeys(["batch_id", "doc_id", "band", key]))
        rows = lookup.key_rows(handle, files, kind, wanted, columns)
        found[kind] = sorted(tuple(map(str, r.values())) for r in rows.to_pylist())
    return found


def test_a_growing_index_answers_alike_after_each_compaction_in_bounded_runs(
    fm_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compaction, "TIER_BYTES", 24 << 10)
    monkeypatch.setattr(layout, "FILE_BYTES", 96 << 10)
    monkeypatch.setattr(merge, "FILE_BYTES", 96 << 10)
    rng = np.random.default_rng(33)
    written: dict[str, list[pa.Table]] = {layout.BANDS: [], layout.SETS: []}
    merged_runs = 0
    for number in range(RUNS):
        bands, sets = _run_rows(rng, f"b{number:02d}")
        handle = data_files.table_handle(fm_settings, "neardup_index", NS)
        write_id = uuid.uuid4()
        files = layout.write_index_files(handle, bands, layout.BANDS, write_id, 0)
        files += layout.write_index_files(handle, sets, layout.SETS, write_id, 0)
        data_files.commit_files(fm_settings, "neardup_index", catalog.NOTHING, files, {}, NS)
        written[layout.BANDS].append(bands)
        written[layout.SETS].append(sets)

        # Keys of every run so far (and absent ones), asked before and after compacting.
        all_bands = pa.concat_tables(written[layout.BANDS])
        all_sets = pa.concat_tables(written[layout.SETS])
        picks = rng.integers(0, all_bands.num_rows, 60)
        keys = {
            layout.BANDS: pa.concat_arrays(
                [
                    all_bands.column("band_hash").take(pa.array(picks)).combine_chunks(),
                    pa.array(rng.integers(-(2**63), 2**63 - 1, 60, dtype=np.int64)),
                ]
            ),
            layout.SETS: pa.concat_arrays(
                [
                    all_sets.column("doc_id")
                    .take(pa.array(picks % all_sets.num_rows))
                    .combine_chunks(),
                    pa.array([f"absent-{number}-{i}" for i in range(20)]),
                ]
            ),
        }
        before = _answers(fm_settings, keys)
        after_files = compaction.compact(
            fm_settings, "neardup_index", NS, lambda message: None, in_process=True
        )
        assert _answers(fm_settings, keys) == before, f"run {number}: compaction changed a lookup"

        runs, strangers = compaction.runs_of(after_files)
        assert not strangers
        for kind in written:
            own = [r for r in runs if r.kind == kind]
            total = sum(r.bytes for r in own)
            tiers = 1 + max(0, int(math.log(max(total, 1) / compaction.TIER_BYTES, 4)))
            # At most MERGE_AT runs in a tier once compacted (a merge's output may join a tier
            # that then merges on the next run): log-many runs in all.
            per_tier = Counter(r.tier for r in own)
            assert max(per_tier.values()) <= compaction.MERGE_AT, (number, kind, per_tier)
            assert len(own) <= compaction.MERGE_AT * (tiers + 1), (number, kind, len(own))
            merged_runs = max(merged_runs, max(len(r.files) for r in own))
        assert len(after_files) == sum(len(r.files) for r in runs)

    # The index holds every written row exactly once, and some merged run spans several files.
    handle = data_files.table_handle(fm_settings, "neardup_index", NS)
    every = data_files.read_files(
        handle, data_files.plan_handle(handle), ("batch_id", "doc_id", "band")
    )
    stored = Counter(tuple(r.values()) for r in every.to_pylist())
    expected = Counter(
        (r["batch_id"], r["doc_id"], r["band"])
        for kind in written
        for r in pa.concat_tables(written[kind]).select(["batch_id", "doc_id", "band"]).to_pylist()
    )
    assert stored == expected
    assert merged_runs > 1
    assert len(runs) < 2 * RUNS / 3  # runs were merged: far fewer than were written
