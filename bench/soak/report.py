"""The soak's results table: per-batch cost and catalog bytes at each reporting point, the
growth ratio against the goal, and the batches-landed-at-once checks."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from bench.harness import duration, median, met
from bench.soak.at_once import AtOnceResult
from bench.soak.footprint import Footprint
from bench.soak.points import GOAL_RATIO, ratio, slope, summarise, window
from bench.soak.sequential import NEAR_DEDUP, BatchRecord, Maintenance, SequentialResult

MB = 1e6
# The per-batch figures reported at each point: name, what it is, how to read it off a record.
FIGURES: tuple[tuple[str, str, Callable[[BatchRecord], float]], ...] = (
    ("run process s", "the run's process, spawn to exit", lambda r: r.process_s),
    ("run s", "Dagster's run, start to success", lambda r: r.run.run_s),
    ("stages s", "every stage's own seconds, summed", lambda r: r.run.stages_s),
    (
        "near dedup s",
        "the near-dedup stage's own seconds",
        lambda r: r.run.stage(NEAR_DEDUP).stage_s,
    ),
    ("commits s", "every stage's Iceberg commits", lambda r: r.run.commit_s),
    (
        "near dedup commit s",
        "the near-dedup stage's commits",
        lambda r: r.run.stage(NEAR_DEDUP).phases.commit_s,
    ),
    ("land s", "the landing operation (`fm land`'s)", lambda r: r.land_s),
    ("tick s", "the sensor's evaluation (it lists every published batch)", lambda r: r.tick_s),
)
HEADLINE = "run process s"  # the goal's figure: a batch's whole run as production pays it


def _mb(value: int) -> str:
    return f"{value / MB:.2f}"


def timing_rows(records: Sequence[BatchRecord], points: Sequence[int]) -> list[str]:
    """One row per point: each figure's median (min–max) over its window."""
    rows = [
        "| point | batches | " + " | ".join(name for name, _, _ in FIGURES) + " |",
        "|--:|---|" + "--:|" * len(FIGURES),
    ]
    for point in points:
        span = window(point)
        cells = [summarise([read(r) for r in records], point).show() for _, _, read in FIGURES]
        rows.append(f"| {point} | {span.start}–{span.stop - 1} | " + " | ".join(cells) + " |")
    return rows


def ratio_rows(records: Sequence[BatchRecord], points: Sequence[int]) -> list[str]:
    """Each figure: last point over first, and its least-squares slope per 100 batches."""
    first, last = points[0], points[-1]
    rows = [
        f"| figure | what | batch {last} / batch {first} | slope per 100 batches (s) |",
        "|---|---|--:|--:|",
    ]
    for name, what, read in FIGURES:
        values = [read(r) for r in records]
        early = summarise(values, first)
        if early.median <= 0:  # nothing measurable early: no ratio to give
            rows.append(f"| {name} | {what} | — | {100 * slope(values):+.3f} |")
            continue
        growth = ratio(summarise(values, last), early)
        goal = ""
        if name == HEADLINE:
            goal = f" (goal ≤ {GOAL_RATIO:.2f}×: {met(growth <= GOAL_RATIO)})"
        rows.append(f"| {name} | {what} | {growth:.2f}×{goal} | {100 * slope(values):+.3f} |")
    return rows


def _footprint_cells(f: Footprint) -> str:
    return (
        f"{_mb(f.catalog_bytes)} | {_mb(f.db_bytes)} | {_mb(f.metadata_bytes)} "
        f"({f.metadata_files:,}) | {_mb(f.data_bytes)} ({f.data_files:,})"
    )


def catalog_rows(maintenance: Sequence[Maintenance]) -> list[str]:
    """Per point: the catalog before and after maintenance, and what maintenance took."""
    rows = [
        "| after batch | when | catalog MB | database MB | metadata MB (files) | data MB (files) "
        "| snapshots | maintenance s | Dagster storage MB |",
        "|--:|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for m in maintenance:
        rows.append(
            f"| {m.point} | before | {_footprint_cells(m.before)} | {m.snapshots[0]:,} | | "
            f"{_mb(m.before.dagster_bytes)} |"
        )
        rows.append(
            f"| {m.point} | after | {_footprint_cells(m.after)} | {m.snapshots[1]:,} | "
            f"{m.seconds:.1f} | {_mb(m.after.dagster_bytes)} |"
        )
    return rows


def overhead(f: Footprint) -> int:
    """What the catalog keeps beyond the data files: its database and the tables' metadata."""
    return f.db_bytes + f.metadata_bytes


def growth_per_batch(maintenance: Sequence[Maintenance]) -> list[tuple[int, int, float]]:
    """(from point, to point, overhead bytes added per batch) after maintenance, per interval."""
    return [
        (a.point, b.point, (overhead(b.after) - overhead(a.after)) / (b.point - a.point))
        for a, b in itertools.pairwise(maintenance)
    ]


def bounded(maintenance: Sequence[Maintenance]) -> tuple[str, bool]:
    """Whether the overhead kept after maintenance grows no faster late than early: the last
    interval's bytes per batch ≤ `GOAL_RATIO` × the first's. History that piled up would make
    every later batch add more than an early one; live entries (a manifest entry, a stage-run
    row, an expired snapshot's history row per commit) add the same per batch."""
    steps = growth_per_batch(maintenance)
    if not steps:
        return "one point only: no growth to compare", True
    shown = ", ".join(f"{a}→{b}: {per / 1e3:.1f} kB" for a, b, per in steps)
    first, last = steps[0][2], steps[-1][2]
    return shown, last <= GOAL_RATIO * max(first, 0.0)


def at_once_section(result: AtOnceResult) -> list[str]:
    ok_runs = result.max_runs <= result.run_limit
    ok_pools = all(result.max_steps.get(p, 0) <= limit for p, limit in result.pool_limits.items())
    all_done = result.succeeded == result.batches and not result.batches_without_success
    once = not result.batches_run_twice and not result.committed_twice and not result.not_committed
    pools = "; ".join(
        f"`{pool}` {result.max_steps.get(pool, 0)} (limit {limit})"
        for pool, limit in result.pool_limits.items()
    )
    return [
        f"## {result.batches} batches landed at once",
        "",
        f"All {result.batches} landed first ({result.land_s:.1f} s) into a fresh home, then a "
        "real `dagster-daemon -w workspace.yaml` started on it (`bench/soak/at_once.py`) with "
        "the instance config every `fm` command writes (the repository's dagster.yaml: "
        "QueuedRunCoordinator, run and pool limits; the `neardup` pool's limit of 1): its "
        "sensor requested the runs, its coordinator queued them, and its DefaultRunLauncher "
        "started each as a process of the code server, as `fm dev` runs them (the Kubernetes "
        "deployment has the same limits on Postgres storage, with a pod per run: no cluster "
        "here). It drained them in "
        f"{duration(result.drain_s)} (runs took {median(result.run_seconds):.1f} s median, "
        f"{min(result.run_seconds):.1f}–{max(result.run_seconds):.1f}).",
        "",
        "| check | found | verdict |",
        "|---|---|---|",
        f"| every batch's run succeeded | {result.succeeded} of {result.batches} "
        f"({result.runs} runs) | {met(all_done)} |",
        f"| no batch run twice | {len(result.batches_run_twice)} run twice | "
        f"{met(not result.batches_run_twice)} |",
        f"| each (batch, stage) committed once (`fm_stage_runs`) | {result.stage_commits:,} "
        f"commits, {len(result.committed_twice)} twice, {result.not_committed} missing | "
        f"{met(once)} |",
        f"| runs at once ≤ `max_concurrent_runs` | {result.max_runs} (limit {result.run_limit})"
        f" | {met(ok_runs)} |",
        f"| steps of a pool at once ≤ its limit | {pools} | {met(ok_pools)} |",
    ]


def render(
    header: str,
    machine: str,
    sequential: SequentialResult,
    points: Sequence[int],
    at_once: AtOnceResult | None,
    quick: bool,
) -> str:
    records = sequential.records
    growth, is_bounded = bounded(sequential.maintenance)
    lines = [
        "# Soak: per-batch cost and catalog size as batches accumulate",
        "",
        header,
        "",
        machine,
        "",
    ]
    if quick:
        lines += [
            "**A `--quick` run: it checks that the benchmark works; its figures are not the "
            "benchmark's.**",
            "",
        ]
    lines += [
        f"{len(records)} batches of {sequential.documents_per_batch} documents, landed and "
        "processed one after another in one FM_HOME (embedded: SQLite catalog, local "
        "warehouse, the repository's dagster.yaml), as production processes them: the "
        "platform's landing operation (`fm land`'s), then one evaluation of "
        "`new_landing_batch_sensor` from the previous tick's cursor (its new partition added as "
        "the daemon adds it), then the run it requested, of `process_landing_batch` for that "
        "partition with the request's tags. **Each run is a new process** (`bench/soak/launch.py`)"
        ": the instance names no run launcher, so Dagster's DefaultRunLauncher starts every run "
        "as a process of its own (a pod with the K8sRunLauncher); an in-process run would carry "
        "caches and memory from batch to batch and hide what a year of runs each pays. The "
        "home's local Ray (2 CPUs) starts once, before batch 1.",
        "",
        "Documents: each a seeded draw of 12 of the article benchmark's ~6,000 sentences under "
        "a unique header (`bench/soak/corpus.py`): no two alike, none a near copy of another. "
        'The policy curates nothing (`base = "none"`), so every document goes through every '
        "stage and every table and index grows by the whole batch.",
        "",
        "Times come from the run's own Dagster event log: the run's start and success, each "
        "step's, and each stage's progress messages; a stage's commit time is from its last Ray "
        "task to its report (Iceberg commits and the stage-run row), as `bench.spine` splits "
        "it. Each row: median (min–max) of the 10 batches ending at the point.",
        "",
        "## Per-batch cost",
        "",
        *timing_rows(records, points),
        "",
        *ratio_rows(records, points),
        "",
        "## Catalog bytes, before and after maintenance",
        "",
        "Right after each point, catalog maintenance (`fm_assets.storage.maintenance.run."
        "maintain`, what `fm maintain` runs) with **retention 0 and grace 0**: the default "
        "policy (7 days, 24 h) would keep every snapshot and file of a run this short, and "
        "between two batches nothing else runs that could still use them. Catalog = the SQL "
        "catalog's database + each table's metadata (metadata files, manifest lists, "
        "manifests) + data files under the warehouse. Dagster's run and event storage is "
        "apart: maintenance does not touch it.",
        "",
        *catalog_rows(sequential.maintenance),
        "",
        "Bounded after maintenance: the database and metadata kept after each maintenance "
        f"grow per batch landed by {growth} ({met(is_bounded)}: the last interval adds no more "
        f"than {GOAL_RATIO:.2f}× per batch what the first did). Data files grow with the "
        "documents kept, as they must.",
        "",
    ]
    if at_once is not None:
        lines += at_once_section(at_once)
    return "\n".join(lines)
