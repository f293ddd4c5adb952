"""Lineage query latency and revocation cost as the number of dataset versions grows.

The shared WARCs are processed once; then versions of the same batch are cut and packed (seq_len
256, small shards) until the catalog holds N live versions, and at each N we time `fm lineage
sample` and `fm lineage doc` (as functions, no process start-up) and one `fm revoke --doc`, which
replaces every live version and rewrites only the shards holding the document.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from bench.fm_home import fresh_home, land
from bench.harness import (
    RESULTS,
    WARC_FILES,
    RunStart,
    log,
    median_and_range,
    parser,
    rerun_command,
    timed,
    write_report,
)
from bench.spine.stages import run_pipeline
from fm_assets.commands import operations
from fm_assets.execution import pipeline
from fm_assets.execution.local_ray import stop_local_ray
from fm_assets.registries.tokenizers import default_tokenizer
from fm_assets.settings import Settings
from fm_assets.shards.build import build_shard_set
from fm_assets.shards.lineage import shard_set_lineage
from fm_assets.shards.revoke import latest_shard_sets
from fm_assets.shards.trace import describe_sample, places_of_document
from fm_assets.versions.dataset_version import create_version, next_version_key, require_version
from fm_assets.versions.revocation import all_versions, replacement_of

SEQ_LEN = 256
SHARD_BYTES = 24 << 10
REPEATS = 5


@dataclass(frozen=True)
class Step:
    """The figures at one catalog size."""

    versions: int  # every version in the catalog when the revocation starts
    live: int  # versions not yet replaced: what the revocation must replace
    sample_s: list[float]
    doc_s: list[float]
    places: int  # (shard set, sample) places `lineage doc` found
    revoke_s: float
    bytes_rewritten: int
    bytes_total: int
    shards_rewritten: int
    shards_total: int


def _live(settings: Settings) -> list[str]:
    return [
        v.version_key
        for v in all_versions(settings)
        if replacement_of(settings, v.version_key) is None
    ]


def _times(fn: Callable[[], object], repeats: int) -> list[float]:
    return [timed(fn)[1] for _ in range(repeats)]


def measure(settings: Settings, batch: str, targets: Sequence[int], repeats: int) -> list[Step]:
    """Grow the live versions to each target, time the lineage queries, then revoke one doc."""
    tokenizer = default_tokenizer(settings)
    rng = random.Random(0)
    revoked: set[str] = set()
    steps = []
    for target in targets:
        while len(_live(settings)) < target:
            key = next_version_key(settings, "web")
            create_version(settings, key, [batch], run_id=None)
            build_shard_set(settings, key, tokenizer, SEQ_LEN, shard_size_bytes=SHARD_BYTES)
        live = _live(settings)
        row = latest_shard_sets(settings, live[0])[0]
        key, samples = str(row["shard_set_key"]), int(row["num_samples"])
        lineage = shard_set_lineage(settings, key, require_version(settings, live[0]))
        held = set(lineage.column("doc_id").to_pylist())
        indices = [rng.randrange(samples) for _ in range(repeats)]
        sample_s = [timed(partial(describe_sample, settings, key, i))[1] for i in indices]
        # A document drawn at random: how many shards it touches is what a revocation costs.
        doc = rng.choice(sorted(held - revoked))
        places = len(places_of_document(settings, doc))
        doc_s = _times(partial(places_of_document, settings, doc), repeats)
        total_versions = len(all_versions(settings))
        # Through Dagster, as `fm revoke` does: replacements are materialized with their checks.
        revoke = partial(operations.revoke, settings, "doc", doc, "benchmark", lambda m: None)
        report, revoke_s, _ = timed(revoke)
        revoked.add(doc)
        rows = report.shard_sets
        step = Step(
            versions=total_versions,
            live=len(live),
            sample_s=sample_s,
            doc_s=doc_s,
            places=places,
            revoke_s=revoke_s,
            bytes_rewritten=sum(int(r["bytes_rewritten"]) for r in rows),
            bytes_total=sum(int(r["bytes_total"]) for r in rows),
            shards_rewritten=sum(int(r["shards_rewritten"]) for r in rows),
            shards_total=sum(int(r["shards_total"]) for r in rows),
        )
        log(f"{step.versions} versions ({step.live} live): revoke {revoke_s:.1f}s")
        steps.append(step)
    return steps


def render(stamp_header: str, machine: str, steps: Sequence[Step]) -> str:
    lines = [
        "# Provenance: lineage queries and revocation cost",
        "",
        stamp_header,
        "",
        machine,
        "",
        "The shared WARCs (one batch, every stage), cut into N versions of the same batch, each "
        f"packed at seq_len {SEQ_LEN} into ~{SHARD_BYTES >> 10} KiB shards. Query times are "
        f"median (min–max) of {REPEATS} calls of the functions behind `fm lineage` (no process "
        "start-up); `lineage doc` asks for a document, drawn at random, held by every live "
        "version. The revocation revokes that document (`fm revoke --doc`): it scans every "
        "version, cuts a replacement for each live one and rebuilds its shard set keeping the "
        "packing, so only shards holding the document are rewritten; bytes are summed over the "
        "rebuilt sets.",
        "",
        "| versions in catalog | live versions replaced | `lineage sample` s | `lineage doc` s "
        "| places found | `revoke` s | shards rewritten / total | bytes rewritten / total |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in steps:
        share = s.bytes_rewritten / s.bytes_total if s.bytes_total else 0.0
        lines.append(
            f"| {s.versions} | {s.live} | {median_and_range(s.sample_s, '.3f')} "
            f"| {median_and_range(s.doc_s, '.3f')} | {s.places} | {s.revoke_s:.1f} "
            f"| {s.shards_rewritten} / {s.shards_total} "
            f"| {s.bytes_rewritten:,} / {s.bytes_total:,} ({share:.1%}) |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    cli = parser(
        "bench.provenance",
        __doc__.splitlines()[0],
        RESULTS / "provenance.md",
        "live versions 1 and 2, not 1, 4 and 16",
    )
    args = cli.parse_args(argv)
    targets = (1, 2) if args.quick else (1, 4, 16)
    run_start = RunStart.now(rerun_command(cli, argv))
    with tempfile.TemporaryDirectory(prefix="fm-bench-provenance-") as scratch:
        settings = fresh_home(Path(scratch) / "home", cpus=2)
        try:
            batch = land(settings, WARC_FILES, "bench")
            run_pipeline(settings, batch, pipeline.STAGE_NAMES)
            steps = measure(settings, batch, targets, REPEATS)
        finally:
            stop_local_ray(settings)  # the home's Ray outlives this process otherwise
    stamp = run_start.finish(["pyiceberg", "mosaicml-streaming"])
    write_report(args.output, render(stamp.header(), stamp.machine_line(), steps))


if __name__ == "__main__":
    main()
