"""Near-dup index lookups as the index grows: what one small batch's near dedup reads of its
namespace's index, and how long it takes, at 10^5, 10^6 and 10^7 index rows.

The index: synthetic documents (random band hashes, 256 random shingles each), 14 band rows
and one shingle-set row a document, written by the stage's own writer
(`execution/near_dedup/layout.py`) 20,000 documents at a time, each written run committed to
a fresh FM_HOME's catalog and followed by the stage's own compaction (`compaction.compact`,
run in the builder's process): the runs and files a namespace that grew this way would hold.

The batch: 20 documents, 14 new, 5 sharing 1, 2, 4, 8 and 14 band hashes with indexed ones
(with shingle sets near theirs, so confirming them fetches the partners' sets), 1 already
indexed. Its index reads are the one-task path's (`near_dedup/one_task.py`): plan the index's
files from the snapshot (manifest list and manifests), the band rows sharing its hashes, its
documents already indexed, the shingle sets of the candidates' partners. Bytes read are the
process's `rchar` (bytes returned by read and pread calls, page cache hits included) over those
steps. Each repeat is a fresh process: a *cold* lookup (no footer cached), then a *warm* one of
another batch of the same shape in the same process (footers cached, as on a warm worker).

    python -m bench.near_dedup_lookup
    python -m bench.near_dedup_lookup --quick     # 10^5 and 10^6 rows, one repeat
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench.harness import (
    REPO,
    RESULTS,
    RunStart,
    interleave,
    log,
    parser,
    rerun_command,
    write_report,
)
from bench.near_dedup_report import report

SIZES = (100_000, 1_000_000, 10_000_000)  # index rows
BANDS = 14
ROWS_PER_DOC = BANDS + 1
CHUNK_DOCS = 20_000
SHINGLES = 256
BATCH_DOCS = 20
SHARED_BANDS = (1, 2, 4, 8, 14)
NAMESPACE = "cloud"


@dataclass(frozen=True)
class Built:
    """The index one size's builder left."""

    rows: int
    documents: int
    band_files: int
    set_files: int
    runs: int
    band_mb: float
    set_mb: float
    build_s: float


@dataclass(frozen=True)
class Lookup:
    """One batch's index reads."""

    seconds: float
    plan_s: float
    bands_s: float
    indexed_s: float
    shingles_s: float
    bytes_read: int
    files_opened: int
    footers_read: int
    footer_bytes: int
    row_groups: int
    filter_blocks: int
    found: list[Any]  # candidates, preexisting and partners' sets found: equal every repeat


@dataclass(frozen=True)
class Repeat:
    cold: Lookup
    warm: Lookup


def _chunk(number: int, docs: range) -> dict[str, Any]:
    """Documents `docs` (of chunk `number`): ids, band hashes, shingle sets; the same every
    time (a chunk's own seed)."""
    rng = np.random.default_rng(1_000 + number)
    prefixes = rng.integers(0, 2**62, len(docs))
    return {
        "ids": [f"{x:016x}{n:048x}" for n, x in zip(docs, prefixes, strict=True)],
        "hashes": rng.integers(-(2**63), 2**63 - 1, (len(docs), BANDS), dtype=np.int64),
        "shingles": np.sort(rng.integers(0, 2**62, (len(docs), SHINGLES)), axis=1),
    }


def _tables(chunk: dict[str, Any], batch_id: str) -> tuple[pa.Table, pa.Table]:
    ids, hashes, shingles = chunk["ids"], chunk["hashes"], chunk["shingles"]
    n = len(ids)
    bands = pa.table(
        {
            "batch_id": pa.array([batch_id] * n * BANDS),
            "doc_id": pa.array(np.repeat(np.array(ids, dtype=object), BANDS)),
            "band": pa.array(np.tile(np.arange(BANDS, dtype=np.int32), n)),
            "band_hash": pa.array(hashes.reshape(-1)),
            "index_config": pa.array(["bench"] * n * BANDS),
        }
    )
    offsets = pa.array(np.arange(0, (n + 1) * SHINGLES, SHINGLES, dtype=np.int32))
    sets = pa.table(
        {
            "batch_id": pa.array([batch_id] * n),
            "doc_id": pa.array(ids),
            "band": pa.array([-1 - int(d[8:16], 16) % 16 for d in ids], pa.int32()),
            "band_hash": pa.array(np.zeros(n, np.int64)),
            "shingle_hashes": pa.ListArray.from_arrays(offsets, pa.array(shingles.reshape(-1))),
            "index_config": pa.array(["bench"] * n),
        }
    )
    return bands, sets


def build_index(home: Path, rows: int) -> Built:
    """Write, commit and compact the index, chunk by chunk; write two batches beside it."""
    from fm_assets.execution import pipeline  # noqa: F401  (declares the stage tables)
    from fm_assets.execution.near_dedup import compaction, layout
    from fm_assets.settings import load_settings
    from fm_assets.storage import catalog, data_files

    started = time.perf_counter()
    settings = load_settings()
    documents = rows // ROWS_PER_DOC
    rng = np.random.default_rng(7)
    partners = rng.choice(documents, size=2 * (len(SHARED_BANDS) + 1), replace=False)
    kept: dict[int, dict[str, Any]] = {}
    for number, start in enumerate(range(0, documents, CHUNK_DOCS)):
        docs = range(start, min(documents, start + CHUNK_DOCS))
        chunk = _chunk(number, docs)
        for p in partners:
            if start <= p < docs.stop:
                i = int(p) - start
                kept[int(p)] = {k: v[i] for k, v in chunk.items()}
        handle = data_files.table_handle(settings, "neardup_index", NAMESPACE)
        bands, sets = _tables(chunk, f"batch-{number}")
        write_id = uuid.uuid4()
        written = layout.write_index_files(handle, bands, layout.BANDS, write_id, 0)
        written += layout.write_index_files(handle, sets, layout.SETS, write_id, 0)
        data_files.commit_files(settings, "neardup_index", catalog.NOTHING, written, {}, NAMESPACE)
        compaction.compact(settings, "neardup_index", NAMESPACE, log, in_process=True)
        log(f"{docs.stop:,} documents indexed")
    for name, chosen in (
        ("a", partners[: len(partners) // 2]),
        ("b", partners[len(partners) // 2 :]),
    ):
        batch = _batch(rng, [kept[int(p)] for p in chosen])
        (home / f"batch-{name}.json").write_text(json.dumps(batch))
    files = data_files.plan_files(settings, "neardup_index", catalog.ALWAYS_TRUE, None, NAMESPACE)
    runs, _ = compaction.runs_of(files)
    of = {k: [t for t in files if layout.kind_of_name(t.file.file_path) == k] for k in layout.KINDS}
    return Built(
        rows=documents * ROWS_PER_DOC,
        documents=documents,
        band_files=len(of[layout.BANDS]),
        set_files=len(of[layout.SETS]),
        runs=len(runs),
        band_mb=sum(t.file.file_size_in_bytes for t in of[layout.BANDS]) / 1e6,
        set_mb=sum(t.file.file_size_in_bytes for t in of[layout.SETS]) / 1e6,
        build_s=time.perf_counter() - started,
    )


def _batch(rng: np.random.Generator, partners: list[dict[str, Any]]) -> dict[str, Any]:
    """A batch of `BATCH_DOCS`: new documents, copies sharing 1..14 bands with the first
    partners (their shingle sets with 5% changed), and the last partner itself."""
    hashes = rng.integers(-(2**63), 2**63 - 1, (BATCH_DOCS, BANDS), dtype=np.int64)
    ids = [f"new-{uuid.UUID(int=int(rng.integers(0, 2**62))).hex}" for _ in range(BATCH_DOCS)]
    sets = [np.sort(rng.integers(0, 2**62, SHINGLES)) for _ in range(BATCH_DOCS)]
    for copy, (shared, partner) in enumerate(zip(SHARED_BANDS, partners, strict=False)):
        hashes[copy, :shared] = partner["hashes"][:shared]
        changed = partner["shingles"].copy()
        changed[rng.choice(SHINGLES, SHINGLES // 20, replace=False)] = rng.integers(0, 2**62)
        sets[copy] = np.unique(changed)
    last = partners[-1]
    ids[-1], hashes[-1], sets[-1] = last["ids"], last["hashes"], last["shingles"]
    return {"ids": ids, "hashes": hashes.tolist(), "shingles": [s.tolist() for s in sets]}


def _rchar() -> int:
    """Bytes this process has read through read and pread calls (Linux /proc)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no rchar line")


def look_up(home: Path, name: str) -> Lookup:
    """The one-task path's index reads for batch `name`, in this process."""
    from fm_assets.curation.minhash.signatures import jaccard
    from fm_assets.execution import pipeline  # noqa: F401  (declares the stage tables)
    from fm_assets.execution.near_dedup.index_reads import (
        indexed_elsewhere,
        other_batches_rows,
        stored_shingles,
    )
    from fm_assets.execution.near_dedup.lookup import ReadCounts
    from fm_assets.execution.near_dedup.tasks import BAND_ROWS, candidates_among
    from fm_assets.settings import load_settings
    from fm_assets.storage.data_files import plan_handle, table_handle

    batch = json.loads((home / f"batch-{name}.json").read_text())
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
    handle = table_handle(load_settings(), "neardup_index", NAMESPACE)
    counts = ReadCounts()
    read_before, started = _rchar(), time.perf_counter()
    files = plan_handle(handle)
    planned = time.perf_counter()
    earlier = other_batches_rows(handle, files, bands, "new", band_tables, counts)
    banded = time.perf_counter()
    indexed = indexed_elsewhere(handle, files, batch["ids"], "new", counts)
    checked = time.perf_counter()
    preexisting, pairs = candidates_among(bands, earlier, indexed, "new", 1, *band_tables)
    partners = sorted(set(pairs.column("partner_doc").to_pylist()))
    sets = stored_shingles(handle, files, partners, counts)
    done = time.perf_counter()
    bytes_read = _rchar() - read_before
    own = {
        d: np.array(s, dtype=np.uint64)
        for d, s in zip(batch["ids"], batch["shingles"], strict=True)
    }
    confirmed = sorted(
        [pos, doc, round(jaccard(own[batch["ids"][pos]], sets[doc]), 3)]
        for pos, doc in zip(
            pairs.column("pos").to_pylist(),
            pairs.column("partner_doc").to_pylist(),
            strict=True,
        )
    )
    return Lookup(
        seconds=done - started,
        plan_s=planned - started,
        bands_s=banded - planned,
        indexed_s=checked - banded,
        shingles_s=done - checked,
        bytes_read=bytes_read,
        files_opened=counts.files,
        footers_read=counts.footers,
        footer_bytes=counts.footer_bytes,
        row_groups=counts.row_groups,
        filter_blocks=counts.filter_blocks,
        found=[confirmed, sorted(set(preexisting.to_pylist())), sorted(sets)],
    )


def _child(home: Path, *args: str) -> dict[str, Any]:
    env = {**os.environ, "FM_HOME": str(home), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "bench.near_dedup_lookup", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child-build"]:
        home = Path(os.environ["FM_HOME"])
        print(json.dumps(asdict(build_index(home, int(argv[1])))))
        return
    if argv[:1] == ["--child-lookup"]:
        home = Path(os.environ["FM_HOME"])
        cold, warm = look_up(home, "a"), look_up(home, "b")
        print(json.dumps({"cold": asdict(cold), "warm": asdict(warm)}))
        return
    cli = parser(
        "bench.near_dedup_lookup",
        __doc__.splitlines()[0],
        RESULTS / "near_dedup_lookup.md",
        "10^5 and 10^6 index rows, one repeat (not up to 10^7, three)",
    )
    cli.add_argument("--repeats", type=int, default=3, help="fresh processes a size (3)")
    args = cli.parse_args(argv)
    sizes = SIZES[:2] if args.quick else SIZES
    repeats = 1 if args.quick else args.repeats
    run_start = RunStart.now(rerun_command(cli, argv))
    with tempfile.TemporaryDirectory(prefix="fm-near-dedup-lookup-") as tmp:
        homes = {size: Path(tmp) / f"home-{size}" for size in sizes}
        built = {}
        for size in sizes:
            log(f"building an index of {size:,} rows")
            built[size] = Built(**_child(homes[size], "--child-build", str(size)))
            log(f"built in {built[size].build_s:.0f} s: {built[size]}")

        def one(size: int) -> Callable[[], Repeat]:
            def run() -> Repeat:
                found = _child(homes[size], "--child-lookup")
                repeat = Repeat(Lookup(**found["cold"]), Lookup(**found["warm"]))
                cold, warm = repeat.cold.seconds, repeat.warm.seconds
                log(f"{size:,} rows: cold {cold:.3f} s, warm {warm:.3f} s")
                return repeat

            return run

        runs = interleave({size: one(size) for size in sizes}, repeats)
    for size, done in runs.items():
        for repeat in done:
            if repeat.cold.found != done[0].cold.found or repeat.warm.found != done[0].warm.found:
                raise SystemExit(f"{size:,} rows: a repeat found other rows than the first")
    stamp = run_start.finish(("pyarrow", "pyiceberg"))
    write_report(args.output, report(stamp, built, runs))


if __name__ == "__main__":
    main()
