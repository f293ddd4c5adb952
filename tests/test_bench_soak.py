"""The soak benchmark's bookkeeping, without running a soak: which batches stand for a point,
their medians and the growth verdict, a run's times read from its event log, the overlap of
runs and steps, the documents' uniqueness, and the catalog's split into metadata and data."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench.fm_home import StagePhases
from bench.soak.at_once import max_overlap
from bench.soak.corpus import document, sentence_pool
from bench.soak.footprint import Footprint, footprint
from bench.soak.points import points_for, ratio, slope, summarise, window
from bench.soak.records import RecordLog
from bench.soak.report import render
from bench.soak.sequential import NEAR_DEDUP, BatchRecord, Maintenance, SequentialResult
from bench.soak.timings import Event, RunTime, StageTime, run_time
from fm_assets.settings import load_settings


def test_points_and_windows() -> None:
    assert points_for(500, quick=False) == (10, 100, 250, 500)
    assert points_for(20, quick=True) == (2, 10, 20)
    assert points_for(300, quick=False) == (10, 100, 250, 300)  # the last batch is a point
    assert list(window(10)) == list(range(1, 11))
    assert list(window(500)) == list(range(491, 501))
    assert list(window(2)) == [1, 2]  # clipped at batch 1
    with pytest.raises(ValueError):
        points_for(0, quick=True)


def test_summaries_ratio_and_slope() -> None:
    per_batch = [float(b) for b in range(1, 21)]  # batch b took b seconds
    at_10 = summarise(per_batch, 10)
    assert (at_10.median, at_10.low, at_10.high, at_10.count) == (5.5, 1.0, 10.0, 10)
    assert at_10.show() == "5.50 (1.00–10.00)"
    at_20 = summarise(per_batch, 20)
    assert ratio(at_20, at_10) == pytest.approx(15.5 / 5.5)
    assert slope(per_batch) == pytest.approx(1.0)
    assert slope([3.0] * 20) == 0.0
    with pytest.raises(ValueError, match="past"):
        summarise(per_batch, 21)


def test_max_overlap_counts_what_runs_at_once() -> None:
    assert max_overlap([(0, 10), (1, 2), (1.5, 3), (5, 6)]) == 3
    assert max_overlap([(0, 1), (1, 2), (2, 3)]) == 1  # back to back is not at once
    assert max_overlap([]) == 0


def _events(stage: str, seconds: str) -> list[Event]:
    step = stage
    return [
        Event(0.0, None, "PIPELINE_START", ""),
        Event(1.0, step, "STEP_START", ""),
        Event(1.2, step, "LOG", f"{stage}: 1 input files of b-1 in 1 slices"),
        Event(1.5, step, "LOG", f"{stage}: 1/1 done, 20 records, 0.0 MB read, 0s elapsed"),
        Event(1.7, step, "LOG", f"{stage}: 20 kept, 0 quarantined in {seconds}s"),
        Event(2.0, step, "STEP_SUCCESS", ""),
        Event(3.0, None, "PIPELINE_SUCCESS", ""),
    ]


def test_a_runs_times_come_from_its_event_log() -> None:
    run = run_time(_events(NEAR_DEDUP, "0.60"))
    assert run.run_s == pytest.approx(3.0)
    near = run.stage(NEAR_DEDUP)
    assert near.step_s == pytest.approx(1.0)
    assert near.stage_s == pytest.approx(0.6)
    # Started 0.6 s before its report (1.1): planned until 1.2, Ray until 1.5, then commits.
    assert near.phases.plan_s == pytest.approx(0.1)
    assert near.phases.ray_s == pytest.approx(0.3)
    assert near.phases.commit_s == pytest.approx(0.2)
    assert run.commit_s == pytest.approx(0.2)
    with pytest.raises(ValueError, match="run span"):
        run_time(_events(NEAR_DEDUP, "0.60")[:-1])


def test_documents_are_unique_and_share_little() -> None:
    pool = sentence_pool()  # the article benchmark, read in place
    assert len(pool) > 5000
    docs = [document(pool, "t", batch, i) for batch in range(3) for i in range(20)]
    assert len(set(docs)) == len(docs)
    assert document(pool, "t", 1, 1) == document(pool, "t", 1, 1)  # seeded
    bodies = [set(d.splitlines()[1:]) for d in docs]
    assert all(not (bodies[0] & other) for other in bodies[1:])  # no shared paragraph


def test_footprint_splits_metadata_from_data(tmp_path: Path) -> None:
    settings = load_settings({"FM_HOME": str(tmp_path)})
    table = tmp_path / "warehouse" / "fm_cloud" / "t"
    (table / "metadata").mkdir(parents=True)
    (table / "data" / "batch_id=b").mkdir(parents=True)
    (table / "metadata" / "00001.metadata.json").write_bytes(b"m" * 10)
    (table / "metadata" / "snap-1.avro").write_bytes(b"m" * 5)
    (table / "data" / "batch_id=b" / "x.parquet").write_bytes(b"d" * 100)
    (tmp_path / "catalog.db").write_bytes(b"c" * 7)
    found = footprint(settings)
    assert (found.metadata_bytes, found.metadata_files) == (15, 2)
    assert (found.data_bytes, found.data_files) == (100, 1)
    assert found.catalog_bytes == 122


def _record(batch: int, seconds: float) -> BatchRecord:
    phases = StagePhases(plan_s=0.0, ray_s=0.0, commit_s=0.1, slices=1)
    stage = StageTime(NEAR_DEDUP, step_s=0.5, stage_s=0.2, phases=phases)
    return BatchRecord(
        batch,
        f"b-{batch}",
        seconds + 1,
        RunTime(seconds, (stage,)),
        Footprint(1, 2, 1, 3, 1, 4),
        land_s=0.0,  # nothing to compare: reported without a ratio
        tick_s=0.1,
    )


def _maintenance(point: int, metadata_after: int) -> Maintenance:
    before = Footprint(10, 10 * point, 5, 100, 5, 0)
    after = Footprint(10, metadata_after, 3, 100, 5, 0)
    return Maintenance(point, before, after, 0.5, (30, 10), 7)


@pytest.mark.parametrize(("growth", "verdict"), [(1.0, "met"), (1.5, "**NOT met**")])
def test_report_gives_the_goal_verdict(growth: float, verdict: str) -> None:
    # Batches 1-10 take 10 s, batches 11-20 take 10 s × growth.
    records = [_record(b, 10.0 if b <= 10 else 10.0 * growth) for b in range(1, 21)]
    result = SequentialResult(records, [_maintenance(10, 500), _maintenance(20, 800)], 20)
    text = render("header", "machine", result, (10, 20), None, quick=True)
    assert "`--quick` run" in text
    row = next(line for line in text.splitlines() if line.startswith("| run process s |"))
    # The goal's figure is the run's process: 1 s more than the run in these records.
    assert f"{(10.0 * growth + 1) / 11:.2f}× (goal ≤ 1.15×: {verdict})" in row
    timing = next(line for line in text.splitlines() if line.startswith("| 20 | 11–20 |"))
    assert f"{10.0 * growth + 1:.2f} " in timing
    land = next(line for line in text.splitlines() if line.startswith("| land s |"))
    assert "| — |" in land


@pytest.mark.parametrize(
    ("kept_after", "verdict"),
    [((1000, 2000, 3000), "met"), ((1000, 2000, 4000), "**NOT met**")],
)
def test_bounded_means_late_batches_add_no_more_than_early_ones(
    kept_after: tuple[int, int, int], verdict: str
) -> None:
    records = [_record(b, 10.0) for b in range(1, 31)]
    kept = [_maintenance(p, m) for p, m in zip((10, 20, 30), kept_after, strict=True)]
    text = render(
        "header", "machine", SequentialResult(records, kept, 20), (10, 20, 30), None, False
    )
    first, last = (kept_after[1] - kept_after[0]) / 10e3, (kept_after[2] - kept_after[1]) / 10e3
    assert f"10→20: {first:.1f} kB, 20→30: {last:.1f} kB ({verdict}" in text


def test_record_log_keeps_each_record_as_measured(tmp_path: Path) -> None:
    path = tmp_path / "soak.batches.jsonl"
    with RecordLog(path) as keep:
        keep({"kind": "batch", **dataclasses.asdict(_record(1, 10.0))})
        # Flushed at once: a run that dies later leaves what it measured.
        assert json.loads(path.read_text())["run"]["stages"][0]["stage"] == NEAR_DEDUP
        keep({"kind": "maintenance", **dataclasses.asdict(_maintenance(10, 500))})
    kinds = [json.loads(line)["kind"] for line in path.read_text().splitlines()]
    assert kinds == ["batch", "maintenance"]
