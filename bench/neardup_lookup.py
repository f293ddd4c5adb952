"""Near-dup index lookup: what one task holds and spends to find a small batch's candidates in a
large namespace's index.

A near-dup task (the one task of a small batch, or a band group's task) needs, of the other
batches' `neardup_index` rows of its bands, those sharing a band hash or a document id with its
batch. Two ways, side by side on the same index and batch, each in a fresh process:

- **A. every row of the bands**: read the files holding the bands, band-filtered (the task's
  lookup before `execution/near_dedup/lookup.py`), then `candidates_among` over them;
- **B. the rows that matter** (`near_dedup.lookup.other_batches_rows`): the same files read a
  million rows at a time, each read filtered with Arrow to the batch's band hashes and
  document ids, then `candidates_among`.

The index: `--documents` documents (default 500,000; `--quick` 100,000) of 14 bands, written as
the stage writes them (one file per 50,000-document batch, sorted by band then hash) and
committed to a fresh FM_HOME's catalog. The batch: 20 documents, of which 5 share 1 to 14 band
hashes with indexed documents and 1 carries an indexed document's id. Both ways must find the
same preexisting documents and the same candidate pairs.

    python -m bench.neardup_lookup
    python -m bench.neardup_lookup --quick
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from bench.harness import (
    REPO,
    RESULTS,
    RunStart,
    Stamp,
    interleave,
    log,
    median,
    median_and_range,
    parser,
    rerun_command,
    write_report,
)

BANDS = 14
PER_BATCH = 50_000  # documents per indexed batch: one data file each
BATCH_DOCS = 20
NAMESPACE = "cloud"
WAYS = {"A": "every row of the bands", "B": "the rows that matter"}


@dataclass(frozen=True)
class Lookup:
    """One way's run, in its own process."""

    rows_held: int
    lookup_s: float
    candidates_s: float
    arrow_peak_mb: float
    rss_peak_mb: float
    preexisting: list[int]
    pairs: list[list[object]]  # (position, partner document), sorted
    files: int

    @property
    def total_s(self) -> float:
        return self.lookup_s + self.candidates_s


def _doc_id(n: int) -> str:
    return hashlib.sha256(f"doc {n}".encode()).hexdigest()


def _band_hashes(rng: np.random.Generator, docs: int) -> np.ndarray:
    return rng.integers(-(2**63), 2**63 - 1, size=(docs, BANDS), dtype=np.int64)


def build_index(home: Path, documents: int) -> None:
    """Write and commit the synthetic index, and the batch's band tables (as JSON) beside it."""
    from fm_assets.execution import pipeline  # noqa: F401  (declares the stage tables)
    from fm_assets.settings import load_settings
    from fm_assets.storage import catalog, data_files

    settings = load_settings()
    rng = np.random.default_rng(7)
    handle = data_files.table_handle(settings, "neardup_index", NAMESPACE)
    written = []
    hashes = _band_hashes(rng, documents)
    for start in range(0, documents, PER_BATCH):
        docs = range(start, min(documents, start + PER_BATCH))
        ids = [_doc_id(n) for n in docs]
        n = len(ids)
        table = pa.table(
            {
                "batch_id": pa.array([f"batch-{start // PER_BATCH}"] * n * BANDS),
                "doc_id": pa.array(ids * BANDS),
                "band": pa.array(np.repeat(np.arange(BANDS, dtype=np.int32), n)),
                "band_hash": pa.array(hashes[docs.start : docs.stop].T.reshape(-1)),
                "shingle_hashes": pa.nulls(n * BANDS, pa.list_(pa.int64())),
                "index_config": pa.array(["bench"] * n * BANDS),
            }
        ).sort_by([("band", "ascending"), ("band_hash", "ascending")])
        written += data_files.write_files(handle, table, uuid.uuid4(), start // PER_BATCH)
    data_files.commit_files(settings, "neardup_index", catalog.NOTHING, written, {}, NAMESPACE)

    # The batch: 14 new documents, 5 sharing 1..14 bands with indexed ones, 1 already indexed.
    own = _band_hashes(rng, BATCH_DOCS)
    ids = [f"new-{i}" for i in range(BATCH_DOCS)]
    for copy, shared in enumerate((1, 2, 4, 8, 14)):
        partner = int(rng.integers(0, documents))
        own[copy, :shared] = hashes[partner, :shared]
    indexed = int(rng.integers(0, documents))
    ids[-1], own[-1] = _doc_id(indexed), hashes[indexed]
    (home / "batch.json").write_text(json.dumps({"ids": ids, "hashes": own.tolist()}))


def look_up(way: str) -> Lookup:
    """One way's lookup and candidates, in this process: its figures."""
    from fm_assets.execution import pipeline  # noqa: F401  (declares the stage tables)
    from fm_assets.execution.near_dedup.lookup import INDEX_LOOKUP, other_batches_rows
    from fm_assets.execution.near_dedup.tasks import BAND_ROWS, candidates_among
    from fm_assets.settings import load_settings
    from fm_assets.storage import catalog, data_files

    settings = load_settings()
    batch = json.loads((settings.home / "batch.json").read_text())
    hashes = np.array(batch["hashes"], dtype=np.int64)
    band_tables = [
        pa.table(
            {
                "band_hash": pa.array(hashes[:, band]),
                "pos": pa.array(np.arange(BATCH_DOCS, dtype=np.int64)),
                "doc_id": pa.array(batch["ids"]),
            },
            schema=BAND_ROWS,
        )
        for band in range(BANDS)
    ]
    bands = list(range(BANDS))
    handle = data_files.table_handle(settings, "neardup_index", NAMESPACE)
    files = data_files.plan_handle(handle)
    started = time.perf_counter()
    if way == "A":
        where = catalog.where_all(
            catalog.where_in("band", bands), catalog.where_not_equal("batch_id", "new")
        )
        held = data_files.read_files(handle, files, INDEX_LOOKUP.names, where)
    else:
        held = other_batches_rows(handle, files, bands, "new", band_tables)
    looked_up = time.perf_counter()
    preexisting, pairs = candidates_among(bands, held, "new", 1, *band_tables)
    done = time.perf_counter()
    found = sorted(
        [p, d]
        for p, d in zip(
            pairs.column("pos").to_pylist(), pairs.column("partner_doc").to_pylist(), strict=True
        )
    )
    return Lookup(
        rows_held=held.num_rows,
        lookup_s=looked_up - started,
        candidates_s=done - looked_up,
        arrow_peak_mb=pa.default_memory_pool().max_memory() / 1e6,
        rss_peak_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        preexisting=sorted(set(preexisting.to_pylist())),  # one per band it is indexed in
        pairs=found,
        files=len(files),
    )


def _child(home: Path, *args: str) -> str:
    env = {**os.environ, "FM_HOME": str(home), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "bench.neardup_lookup", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench.neardup_lookup {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child-build"]:
        build_index(Path(os.environ["FM_HOME"]), int(argv[1]))
        return
    if argv[:1] == ["--child-way"]:
        print(json.dumps(asdict(look_up(argv[1]))))
        return
    cli = parser(
        "bench.neardup_lookup",
        __doc__.splitlines()[0],
        RESULTS / "neardup_lookup.md",
        "100,000 indexed documents and one repeat, not 500,000 and three",
    )
    cli.add_argument("--documents", type=int, help="indexed documents (default 500,000)")
    args = cli.parse_args(argv)
    documents = args.documents or (100_000 if args.quick else 500_000)
    repeats = 1 if args.quick else 3
    run_start = RunStart.now(rerun_command(cli, argv))
    with tempfile.TemporaryDirectory(prefix="fm-lookup-") as tmp:
        home = Path(tmp) / "home"
        log(f"indexing {documents:,} documents x {BANDS} bands")
        _child(home, "--child-build", str(documents))

        def one_way(way: str) -> Callable[[], Lookup]:
            def run() -> Lookup:
                done = Lookup(**json.loads(_child(home, "--child-way", way)))
                log(f"{way} ({WAYS[way]}): {done.total_s:.2f} s")
                return done

            return run

        runs = interleave({way: one_way(way) for way in WAYS}, repeats)
    first = runs["A"][0]
    for way, done in runs.items():
        for run in done:
            if run.pairs != first.pairs or run.preexisting != first.preexisting:
                raise SystemExit(f"way {way} found other candidates than way A")
    stamp = run_start.finish(("pyarrow", "pyiceberg"))
    write_report(args.output, report(stamp, documents, runs))


def _figure(runs: list[Lookup], key: str, fmt: str) -> str:
    return median_and_range([float(getattr(r, key)) for r in runs], fmt)


def report(stamp: Stamp, documents: int, runs: dict[str, list[Lookup]]) -> str:
    a, b = runs["A"], runs["B"]
    speedup = median([r.total_s for r in a]) / median([r.total_s for r in b])
    rss = median([r.rss_peak_mb for r in a]) / median([r.rss_peak_mb for r in b])
    first = a[0]
    lines = [
        "# Near-dup index lookup: every row of the bands vs the rows that matter",
        "",
        f"{stamp.header()} {stamp.machine_line()}",
        "",
        f"Index: {documents:,} documents × {BANDS} bands = {documents * BANDS:,} rows in "
        f"{first.files} data files (one per {PER_BATCH:,}-document batch, sorted by band then "
        f"hash). Batch: {BATCH_DOCS} documents, 5 sharing 1–14 band hashes with indexed ones, "
        f"1 already indexed. Each way runs in a fresh process, interleaved, {len(a)} repeat(s); "
        "seconds are medians (min–max). Peak RSS includes the process's imports. Both ways "
        f"found the same candidates: {len(first.pairs)} pairs, {len(first.preexisting)} "
        "preexisting.",
        "",
        "| way | rows held | lookup s | candidates s | peak Arrow MB | peak RSS MB |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for way, done in runs.items():
        lines.append(
            f"| {way}. {WAYS[way]} | {done[0].rows_held:,} | "
            f"{_figure(done, 'lookup_s', '.2f')} | {_figure(done, 'candidates_s', '.2f')} | "
            f"{_figure(done, 'arrow_peak_mb', '.0f')} | {_figure(done, 'rss_peak_mb', '.0f')} |"
        )
    lines += [
        "",
        f"**B takes {speedup:.1f}× less time than A (lookup and candidates) and "
        f"{rss:.1f}× less peak memory**; what B holds of the index beyond its matches is one "
        "read of at most a million rows (`READ_ROWS_AT_ONCE`), whatever the namespace's size.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
