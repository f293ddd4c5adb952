"""Spine benchmark: landing -> four curation stages on Ray -> dataset version -> MDS shards.

One run, every figure from that run, written to `bench/RESULTS.md`:

1. End-to-end stage throughput (docs/s, MB/s) on the shared WARCs and on generated JSONL batches
   of ~5,000 distinct documents built from the WARC pages' extracted text.
2. The tokenize stage against the library limit: `run_stage("tokenized_documents")` and a raw
   `Tokenizer.encode_batch` on the same texts in this process, interleaved A B A B.
3. MDS write throughput: `build_shard_set`, the bare `write_shard_set` and `ndarray.tofile` of the
   same token bytes (the disk limit), interleaved.

The machine is shared and noisy: compare the ratios measured side by side, not absolute numbers.
Everything lives in a temporary FM_HOME; the user's state is never touched.

    .venv/bin/python bench/bench_spine.py            # full run
    .venv/bin/python bench/bench_spine.py --quick    # smaller inputs, fewer repeats
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import importlib.metadata
import json
import os
import platform
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import EqualTo

from fm_assets.curation.policy import DEFAULT_POLICY
from fm_assets.execution import pipeline
from fm_assets.execution.compute import ensure_ray, ray_cpus, split_rows
from fm_assets.execution.runner import run_stage
from fm_assets.registries.tokenizers import default_tokenizer, register_tokenizer
from fm_assets.settings import Settings, load_settings
from fm_assets.shards.build import build_shard_set
from fm_assets.shards.packing import PackedSequence, pack_documents
from fm_assets.stages.base import StageResult
from fm_assets.stages.tokenize import TokenizeStage, load_tokenizer
from fm_assets.storage import catalog
from fm_assets.storage.landing import land_files, read_manifest
from fm_assets.storage.objectstore import open_object_store
from fm_assets.versions.dataset_version import create_version, require_version, version_documents

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
WARC_FILES = sorted((SHARED_DATA / "warc").glob("*.warc.gz"))
TOKENIZER_FILE = SHARED_DATA / "tokenizers" / "gpt-neox-20b.json"
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "RESULTS.md"
SEQ_LEN = 2048
TOKENIZE_TARGET = 0.85  # stage tokens/s over raw encode_batch tokens/s
MB = 1e6
STAGES = pipeline.STAGE_NAMES
TOKENIZE = STAGES[-1]


@dataclass(frozen=True)
class BenchConfig:
    """Input sizes and repeat counts of one benchmark run."""

    mode: str
    warc_repeats: int  # timed WARC pipelines, each in a fresh FM_HOME, after one cold run
    big_docs: int  # documents per generated JSONL batch
    repeats: int  # generated batches = tokenize A/B pairs = shard-build repeats
    tofile_inner: int  # tofile calls per repeat (one call takes only milliseconds)
    profile_docs: int  # documents of the last batch the tokenize profile runs on


FULL = BenchConfig(
    "full", warc_repeats=3, big_docs=5_000, repeats=5, tofile_inner=5, profile_docs=2_000
)
QUICK = BenchConfig(
    "quick", warc_repeats=1, big_docs=1_500, repeats=2, tofile_inner=3, profile_docs=1_000
)


@dataclass(frozen=True)
class StageTiming:
    """One timed `run_stage` call and the phases its progress messages delimit."""

    stage: str
    seconds: float
    docs_in: int
    docs_kept: int
    bytes_in: int  # landed file bytes (raw stage), raw payload bytes, or UTF-8 text bytes
    # Call -> "N input rows" message: stage build, stage-run lookups, Iceberg read of the input.
    read_s: float | None
    # -> last "k/n chunks" message: Ray tasks, including shipping chunks and results.
    ray_s: float | None
    # -> return: driver-side combine (exact dedup) and the Iceberg commits.
    commit_s: float | None


@dataclass(frozen=True)
class TokenizePair:
    """One A/B pair: the tokenize stage, then the bare library on the same texts."""

    docs: int
    text_bytes: int
    stage_s: float
    stage_cpu_s: float  # CPU seconds of the driver, Ray's daemons and workers during A
    stage_tokens: int  # includes one EOS per document
    raw_s: float
    raw_cpu_s: float  # the same during B: ~2x raw_s when B had both cores to itself
    raw_tokens: int

    @property
    def ratio(self) -> float:
        """Stage throughput over library throughput on identical work."""
        return self.raw_s / self.stage_s

    @property
    def cpu_ratio(self) -> float:
        """Library CPU seconds over stage CPU seconds: efficiency, less sensitive to noise."""
        return self.raw_cpu_s / self.stage_cpu_s


@dataclass(frozen=True)
class ShardRun:
    """One interleaved repeat of build_shard_set, bare write_shard_set and tofile."""

    build_s: float
    build_bytes: int
    write_s: float
    write_bytes: int
    tofile_s: float
    tofile_bytes: int
    fsync_s: float  # tofile, then fsync: the bytes reach the disk


@dataclass
class Results:
    """Everything the report is built from."""

    config: BenchConfig
    started: dt.datetime
    ray_start_s: float = 0.0
    worker_niceness: int = 0
    idle_cores: float = 0.0  # CPU the idle Ray daemons (and this process) use, in cores
    streaming_import_s: float = 0.0
    version_s: float = 0.0
    warc_decompressed_bytes: int = 0
    warc_cold: list[StageTiming] = field(default_factory=list)
    warc_runs: list[list[StageTiming]] = field(default_factory=list)
    big_file_bytes: int = 0
    big_runs: list[list[StageTiming]] = field(default_factory=list)
    pairs: list[TokenizePair] = field(default_factory=list)
    profile: dict[str, float] = field(default_factory=dict)
    shard_runs: list[ShardRun] = field(default_factory=list)
    shard_samples: int = 0
    shard_tokens: int = 0
    elapsed_s: float = 0.0
    load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


# --------------------------------------------------------------------------------------------
# Setup
# --------------------------------------------------------------------------------------------


def fresh_settings(root: Path, name: str) -> Settings:
    """Settings over a new FM_HOME with every table created and the NeoX tokenizer as default.

    Table creation and tokenizer registration are one-time costs of a home, not of a stage run,
    so they happen here, outside every timed region.
    """
    settings = load_settings({"FM_HOME": str(root / name), "FM_RAY_NUM_CPUS": "2"})
    for table in catalog.TABLES:
        catalog.load_table(settings, table)
    register_tokenizer(settings, TOKENIZER_FILE, make_default=True)
    return settings


def land(settings: Settings, paths: Sequence[Path]) -> str:
    """Land `paths` as one new batch; return its id (fails if the batch existed already)."""
    store = open_object_store(settings)
    manifest, created = land_files(store, list(paths), source="bench", license="NOASSERTION")
    if not created:
        raise RuntimeError(
            f"batch {manifest.batch_id} existed already: the benchmark needs new work"
        )
    return manifest.batch_id


# --------------------------------------------------------------------------------------------
# 1. End-to-end stages
# --------------------------------------------------------------------------------------------


def _phases(
    started: float, ended: float, events: list[tuple[float, str]]
) -> tuple[float | None, float | None, float | None]:
    """Split a stage run at its "input rows" and last "chunks" progress messages."""
    read_at = next((t for t, message in events if " input rows " in message), None)
    chunk_times = [t for t, message in events if message.endswith(" chunks")]
    if read_at is None or not chunk_times:
        return None, None, None
    return read_at - started, chunk_times[-1] - read_at, ended - chunk_times[-1]


def stage_input_bytes(settings: Settings, stage: str, batch_id: str) -> int:
    """Bytes a stage consumed: landed file bytes, raw payload bytes, or UTF-8 text bytes."""
    upstream = pipeline.upstream_of(stage)
    if upstream is None:
        return read_manifest(open_object_store(settings), batch_id).total_bytes
    column = "raw_size" if upstream == "raw_documents" else "text"
    values = catalog.read_batch(settings, upstream, batch_id, columns=(column,)).column(column)
    if column == "text":
        values = pc.binary_length(values)
    return int(pc.sum(values).as_py() or 0)


def run_timed_stage(settings: Settings, stage: str, batch_id: str) -> StageTiming:
    """Time one `run_stage` call that must do real work (not the up-to-date short-circuit)."""
    events: list[tuple[float, str]] = []
    started = time.perf_counter()
    report = run_stage(
        settings,
        stage,
        batch_id,
        run_id="bench",
        progress=lambda message: events.append((time.perf_counter(), message)),
    )
    ended = time.perf_counter()
    if report.skipped:
        raise RuntimeError(f"{stage} for {batch_id} was up to date: nothing was measured")
    read_s, ray_s, commit_s = _phases(started, ended, events)
    return StageTiming(
        stage=stage,
        seconds=ended - started,
        docs_in=report.records_in,
        docs_kept=report.records_kept,
        bytes_in=0,
        read_s=read_s,
        ray_s=ray_s,
        commit_s=commit_s,
    )


def with_input_bytes(settings: Settings, batch_id: str, timing: StageTiming) -> StageTiming:
    """The timing with the stage's input bytes filled in (measured after the clock stopped)."""
    return replace(timing, bytes_in=stage_input_bytes(settings, timing.stage, batch_id))


def run_pipeline(settings: Settings, batch_id: str, stages: Sequence[str]) -> list[StageTiming]:
    """Run `stages` in order for one batch, each timed on its own."""
    timings = [run_timed_stage(settings, stage, batch_id) for stage in stages]
    return [with_input_bytes(settings, batch_id, t) for t in timings]


def describe_run(label: str, timings: Sequence[StageTiming]) -> None:
    parts = ", ".join(f"{t.stage.split('_')[0]} {t.seconds:.2f}s" for t in timings)
    log(f"{label}: {parts}; total {sum(t.seconds for t in timings):.2f}s")


Page = tuple[str, str | None, str | None]  # extracted text, url, lang hint


def warc_pages(settings: Settings, batch_id: str) -> list[Page]:
    """The extracted text, url and language hint of every kept WARC page."""
    table = catalog.read_batch(
        settings, "extracted_documents", batch_id, columns=("text", "url", "lang_hint")
    )
    columns = [table.column(name).to_pylist() for name in ("text", "url", "lang_hint")]
    return list(zip(*columns, strict=True))


def write_big_jsonl(pages: Sequence[Page], count: int, repeat: int, out: Path) -> Path:
    """Write `count` distinct documents built from the WARC pages' text as one JSONL file.

    Document i is page i mod len(pages) with its lines shuffled (seeded) under a header line
    naming the repeat and the index, so no two documents, within or across repeats, share bytes
    and exact dedup keeps every one of them.
    """
    rng = random.Random(repeat * 1_000_003 + count)
    with out.open("w", encoding="utf-8") as f:
        for i in range(count):
            text, url, lang = pages[i % len(pages)]
            lines = text.split("\n")
            rng.shuffle(lines)
            body = "\n".join([f"Benchmark document {repeat}-{i}", *lines])
            record = {"id": f"bench-{repeat}-{i}", "text": body, "url": url, "lang": lang}
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return out


# --------------------------------------------------------------------------------------------
# 2. Tokenize stage vs the library
# --------------------------------------------------------------------------------------------


def _niceness() -> int:
    return os.nice(0)


def worker_niceness() -> int:
    """The scheduling niceness Ray gives its worker processes (Ray's `worker_niceness`)."""
    import ray

    return int(ray.get(ray.remote(num_cpus=1)(_niceness).remote()))


def tree_cpu_seconds() -> float:
    """CPU seconds used so far by this process and every live descendant (Linux /proc).

    Local Ray's daemons and workers are all descendants of the driver, so the difference of two
    readings is the CPU the whole run spent in between, whatever else the shared machine runs.
    Each process's own time plus its reaped children's counts once: reaped children have left
    the tree.
    """
    ticks = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    used: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue  # exited while we looked
        # Fields after the parenthesised command: state, ppid, ..., utime (14), stime, cutime,
        # cstime (17), counted from 1 over the whole line.
        fields = stat.rsplit(")", 1)[1].split()
        pid = int(entry.name)
        parent[pid] = int(fields[1])
        used[pid] = sum(int(v) for v in fields[11:15])
    tree = {os.getpid()}
    grew = True
    while grew:
        children = {pid for pid, ppid in parent.items() if ppid in tree} - tree
        tree |= children
        grew = bool(children)
    return sum(used.get(pid, 0) for pid in tree) / ticks


def raw_encode(tokenizer: object, texts: list[str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (process tree) and tokens of one `encode_batch` over `texts`."""
    cpu = tree_cpu_seconds()
    started = time.perf_counter()
    encodings = tokenizer.encode_batch(texts, add_special_tokens=False)  # type: ignore[attr-defined]
    seconds = time.perf_counter() - started
    return seconds, tree_cpu_seconds() - cpu, sum(len(e) for e in encodings)


def tokenize_pair(
    settings: Settings, batch_id: str, tokenizer: object
) -> tuple[StageTiming, TokenizePair]:
    """A: the tokenize stage on a batch; B: the bare library on its very texts, right after."""
    texts = (
        catalog.read_batch(settings, "normalized_documents", batch_id, columns=("text",))
        .column("text")
        .to_pylist()
    )
    cpu = tree_cpu_seconds()
    timing = run_timed_stage(settings, TOKENIZE, batch_id)
    stage_cpu_s = tree_cpu_seconds() - cpu
    stage = with_input_bytes(settings, batch_id, timing)
    raw_s, raw_cpu_s, raw_tokens = raw_encode(tokenizer, texts)
    tokens = catalog.read_batch(settings, TOKENIZE, batch_id, columns=("num_tokens",))
    pair = TokenizePair(
        docs=len(texts),
        text_bytes=stage.bytes_in,
        stage_s=stage.seconds,
        stage_cpu_s=stage_cpu_s,
        stage_tokens=int(pc.sum(tokens.column("num_tokens")).as_py() or 0),
        raw_s=raw_s,
        raw_cpu_s=raw_cpu_s,
        raw_tokens=raw_tokens,
    )
    return stage, pair


def _profile_chunk(stage: TokenizeStage, chunk: pa.Table) -> dict[str, float]:
    """In a Ray worker: thread CPU seconds of encode_batch, of the `.ids` lists, of `process`.

    Thread CPU time, not wall time: what other tenants of the machine take does not count.
    """
    tokenizer = load_tokenizer(stage.tokenizer_uri, stage.tokenizer_hash)
    texts = chunk.column("text").to_pylist()
    started = time.thread_time()
    encodings = tokenizer.encode_batch(texts, add_special_tokens=False)  # type: ignore[attr-defined]
    encode_s = time.thread_time() - started
    started = time.thread_time()
    ids = [e.ids for e in encodings]
    ids_s = time.thread_time() - started
    del ids, encodings
    started = time.thread_time()
    stage.process(chunk)
    process_s = time.thread_time() - started
    return {"encode_s": encode_s, "ids_s": ids_s, "process_s": process_s}


def _timed_process(stage: TokenizeStage, chunk: pa.Table) -> tuple[StageResult, int, float]:
    """In a Ray worker: `stage.process` as the runner calls it, plus the worker pid and seconds."""
    started = time.perf_counter()
    result = stage.process(chunk)
    return result, os.getpid(), time.perf_counter() - started


T = TypeVar("T")


def measured(fn: Callable[[], T]) -> tuple[T, float, float]:
    """fn()'s result, wall seconds and CPU seconds of the whole process tree."""
    cpu = tree_cpu_seconds()
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started, tree_cpu_seconds() - cpu


def profile_tokenize(settings: Settings, batch_id: str, docs: int) -> dict[str, float]:
    """Where the tokenize stage's time and CPU go, each piece run on its own on one batch.

    The Ray phase is replayed on the whole batch with the runner's chunking, timing `process`
    inside each task, so wall minus busy time is what Ray scheduling, shipping chunks and
    results, and uneven chunks cost. The split of `process` runs on the first `docs` rows only:
    it tokenizes twice, and shares, not totals, are what it is for.
    """
    import ray

    out: dict[str, float] = {}
    report, out["lookups_s"], out["lookups_cpu"] = measured(
        lambda: run_stage(settings, TOKENIZE, batch_id)  # the up-to-date path: lookups only
    )
    if not report.skipped:
        raise RuntimeError("expected a second tokenize run of the same batch to be up to date")
    inputs, out["read_s"], out["read_cpu"] = measured(
        lambda: catalog.read_batch(settings, "normalized_documents", batch_id)
    )
    out["input_mb"] = inputs.nbytes / MB

    stage = pipeline.entry(TOKENIZE).build(settings, DEFAULT_POLICY)
    if not isinstance(stage, TokenizeStage):
        raise TypeError(f"{TOKENIZE} builds {type(stage).__name__}, expected TokenizeStage")
    cpus = ray_cpus()
    out["cpus"] = cpus
    chunks = split_rows(inputs, cpus)
    replay = ray.remote(num_cpus=1)(_timed_process)
    done, out["replay_s"], out["replay_cpu"] = measured(
        lambda: ray.get([replay.remote(stage, chunk) for chunk in chunks])
    )
    busy: dict[int, float] = {}
    for _, pid, seconds in done:
        busy[pid] = busy.get(pid, 0.0) + seconds
    out["replay_chunks"] = len(chunks)
    out["replay_busy_mean_s"] = sum(busy.values()) / cpus
    out["replay_busy_max_s"] = max(busy.values())
    out["output_mb"] = sum(result.kept.nbytes for result, _, _ in done) / MB
    del done

    chunks = split_rows(inputs.slice(0, docs), cpus)
    remote = ray.remote(num_cpus=1)(_profile_chunk)
    per_chunk = ray.get([remote.remote(stage, chunk) for chunk in chunks])
    out["split_chunks"] = len(chunks)
    out["split_docs"] = min(docs, inputs.num_rows)
    for key in ("encode_s", "ids_s", "process_s"):
        out[f"split_{key}"] = sum(c[key] for c in per_chunk)

    kept = catalog.read_batch(settings, TOKENIZE, batch_id)
    # The same rows over the same partition: a real commit that changes no data.
    _, out["commit_s"], out["commit_cpu"] = measured(
        lambda: catalog.replace_rows(settings, TOKENIZE, kept, EqualTo("batch_id", batch_id))
    )
    return out


# --------------------------------------------------------------------------------------------
# 3. MDS shards
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PackedInput:
    """A version's packed sequences with their tokens, ready to hand to `write_shard_set`."""

    sequences: list[tuple[PackedSequence, np.ndarray]]
    padded: np.ndarray  # (samples, seq_len) uint16: the token bytes of the shard set
    vocab_size: int
    pad_token_id: int
    content_hash: str
    tokenizer_hash: str


def pack_version(settings: Settings, version_key: str, tokenizer: object) -> PackedInput:
    """Read a version's tokens and pack them as `build_shard_set` does (untimed setup)."""
    version = require_version(settings, version_key)
    info = default_tokenizer(settings)
    docs = version_documents(settings, version, TOKENIZE, ("doc_id", "tokens"))
    docs = docs.take(pc.sort_indices(docs, sort_keys=[("doc_id", "ascending")]))
    tokens = docs.column("tokens").combine_chunks()
    flat = tokens.values.to_numpy(zero_copy_only=False)
    offsets = tokens.offsets.to_numpy()
    doc_ids = docs.column("doc_id").to_pylist()
    row_of = {doc_id: i for i, doc_id in enumerate(doc_ids)}
    sequences = pack_documents(
        list(zip(doc_ids, np.diff(offsets).tolist(), strict=True)),
        SEQ_LEN,
        shuffle_seed=int(version.content_hash[:16], 16) ^ SEQ_LEN,
    )
    pad = tokenizer.token_to_id("<|padding|>")  # type: ignore[attr-defined]
    pad_token_id = 0 if pad is None else int(pad)
    padded = np.full((len(sequences), SEQ_LEN), pad_token_id, dtype=np.uint16)
    pairs: list[tuple[PackedSequence, np.ndarray]] = []
    for n, sequence in enumerate(sequences):
        starts = [offsets[row_of[s.doc_id]] + s.doc_offset for s in sequence.segments]
        ids = np.concatenate(
            [flat[a : a + s.length] for a, s in zip(starts, sequence.segments, strict=True)]
        )
        padded[n, : ids.size] = ids
        pairs.append((sequence, ids))
    return PackedInput(
        pairs, padded, info.vocab_size, pad_token_id, version.content_hash, info.tokenizer_hash
    )


def time_write_shard_set(packed: PackedInput, out_dir: Path) -> tuple[float, int]:
    """Seconds and shard bytes of one bare `write_shard_set` over pre-packed sequences."""
    from fm_assets.shards.writer import ShardSetHeader, write_shard_set

    header = ShardSetHeader(
        shard_set_key=f"bench-raw/{out_dir.name}",
        source_version="bench@v1",
        version_content_hash=packed.content_hash,
        tokenizer_hash=packed.tokenizer_hash,
    )
    started = time.perf_counter()
    manifest = write_shard_set(
        packed.sequences,
        str(out_dir),
        seq_len=SEQ_LEN,
        vocab_size=packed.vocab_size,
        pad_token_id=packed.pad_token_id,
        header=header,
    )
    return time.perf_counter() - started, sum(s.bytes for s in manifest.shards)


def time_tofile(array: np.ndarray, path: Path, inner: int, *, fsync: bool) -> float:
    """Median seconds of `inner` `ndarray.tofile` calls, optionally each followed by fsync."""
    samples = []
    for _ in range(inner):
        started = time.perf_counter()
        with path.open("wb") as f:
            array.tofile(f)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        samples.append(time.perf_counter() - started)
        path.unlink()
    return median(samples)


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


def run(config: BenchConfig, scratch: Path) -> Results:
    """Run every measurement once, in order, on one Ray."""
    from tokenizers import Tokenizer

    results = Results(config=config, started=dt.datetime.now(dt.UTC), load_before=os.getloadavg())
    clock = time.perf_counter()
    results.warc_decompressed_bytes = sum(len(gzip.decompress(p.read_bytes())) for p in WARC_FILES)

    cold = fresh_settings(scratch, "home-warc-cold")
    started = time.perf_counter()
    ensure_ray(cold)
    results.ray_start_s = time.perf_counter() - started
    log(f"Ray started in {results.ray_start_s:.1f}s")
    results.worker_niceness = worker_niceness()
    _, idle_s, idle_cpu = measured(lambda: time.sleep(3))
    results.idle_cores = idle_cpu / idle_s

    # The first run on a fresh Ray also starts the worker processes and their imports.
    cold_batch = land(cold, WARC_FILES)
    results.warc_cold = run_pipeline(cold, cold_batch, STAGES)
    describe_run("WARC cold run", results.warc_cold)
    pages = warc_pages(cold, cold_batch)
    for repeat in range(config.warc_repeats):
        # The same files land as the same batch id: a fresh home per repeat makes the work real.
        settings = fresh_settings(scratch, f"home-warc-{repeat}")
        results.warc_runs.append(run_pipeline(settings, land(settings, WARC_FILES), STAGES))
        describe_run(f"WARC repeat {repeat + 1}", results.warc_runs[-1])

    big = fresh_settings(scratch, "home-big")
    info = default_tokenizer(big)
    os.environ["TOKENIZERS_PARALLELISM"] = "true"  # this process only; Ray workers get "false"
    tokenizer = Tokenizer.from_file(str(TOKENIZER_FILE))
    big_batches: list[str] = []
    for repeat in range(config.repeats):
        path = write_big_jsonl(pages, config.big_docs, repeat, scratch / f"docs-{repeat}.jsonl")
        results.big_file_bytes = path.stat().st_size
        batch = land(big, [path])
        big_batches.append(batch)
        timings = run_pipeline(big, batch, STAGES[:-1])
        stage, pair = tokenize_pair(big, batch, tokenizer)
        results.big_runs.append([*timings, stage])
        results.pairs.append(pair)
        describe_run(f"JSONL repeat {repeat + 1}", results.big_runs[-1])
        log(f"  A tokenize stage {pair.stage_s:.2f}s, B raw encode_batch {pair.raw_s:.2f}s")

    log("profiling the tokenize stage")
    results.profile = profile_tokenize(big, big_batches[-1], config.profile_docs)

    started = time.perf_counter()
    import streaming  # noqa: F401  (write_shard_set imports it: keep its cost out of timings)

    results.streaming_import_s = time.perf_counter() - started
    started = time.perf_counter()
    create_version(big, "bench@v1", [big_batches[0]], run_id=None)
    results.version_s = time.perf_counter() - started
    packed = pack_version(big, "bench@v1", tokenizer)
    results.shard_samples = len(packed.sequences)
    results.shard_tokens = sum(ids.size for _, ids in packed.sequences)
    for repeat in range(config.repeats):
        version_key = f"bench@v{repeat + 1}"
        if repeat:
            # Same batch, new version key: build_shard_set writes a new set instead of skipping.
            create_version(big, version_key, [big_batches[0]], run_id=None)
        started = time.perf_counter()
        built = build_shard_set(big, version_key, info, SEQ_LEN)
        build_s = time.perf_counter() - started
        if not built.created:
            raise RuntimeError(f"{version_key}: build_shard_set skipped; nothing was measured")
        write_s, written = time_write_shard_set(packed, scratch / f"raw-shards-{repeat}")
        target = scratch / "tofile.bin"
        tofile_s = time_tofile(packed.padded, target, config.tofile_inner, fsync=False)
        fsync_s = time_tofile(packed.padded, target, config.tofile_inner, fsync=True)
        results.shard_runs.append(
            ShardRun(
                build_s=build_s,
                build_bytes=sum(s.bytes for s in built.manifest.shards),
                write_s=write_s,
                write_bytes=written,
                tofile_s=tofile_s,
                tofile_bytes=packed.padded.nbytes,
                fsync_s=fsync_s,
            )
        )
        log(
            f"shards repeat {repeat + 1}: build_shard_set {build_s:.2f}s, "
            f"write_shard_set {write_s:.2f}s, tofile {tofile_s * 1e3:.1f}ms, "
            f"tofile+fsync {fsync_s * 1e3:.1f}ms"
        )
    results.elapsed_s = time.perf_counter() - clock
    results.load_after = os.getloadavg()
    return results


# --------------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------------


def _seconds(values: Sequence[float], digits: int = 2) -> str:
    """'median (min–max)' of timings, or the single value when there is one."""
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def _optional(values: Sequence[float | None]) -> str:
    value = _median_present(values)
    return "n/a" if value is None else f"{value:.2f}"


def _stage_rows(label: str, runs: Sequence[Sequence[StageTiming]]) -> list[str]:
    """Table rows for one input: a row per stage (median over repeats) and a total row."""
    rows = []
    for index, first in enumerate(runs[0]):
        timings = [run[index] for run in runs]
        seconds = [t.seconds for t in timings]
        s = median(seconds)
        phases = " / ".join(
            _optional([getattr(t, name) for t in timings])
            for name in ("read_s", "ray_s", "commit_s")
        )
        rows.append(
            f"| {label} | {first.stage} | {first.docs_in:,} | {first.docs_kept:,} "
            f"| {first.bytes_in / MB:.2f} | {_seconds(seconds)} | {first.docs_in / s:,.0f} "
            f"| {first.bytes_in / MB / s:.2f} | {phases} |"
        )
    totals = [sum(t.seconds for t in run) for run in runs]
    total = median(totals)
    landed, docs = runs[0][0].bytes_in, runs[0][0].docs_in
    rows.append(
        f"| {label} | **all four** | {docs:,} | {runs[0][-1].docs_kept:,} | {landed / MB:.2f} "
        f"| {_seconds(totals)} | {docs / total:,.0f} | {landed / MB / total:.2f} | |"
    )
    return rows


def _versions() -> str:
    names = ["ray", "pyarrow", "pyiceberg", "tokenizers", "mosaicml-streaming", "numpy"]
    return ", ".join(f"{name} {importlib.metadata.version(name)}" for name in names)


def render(results: Results) -> str:
    """The Markdown report."""
    config = results.config
    warc = results.warc_runs[0]
    payload = warc[1].bytes_in
    lines = [
        "# fm platform spine benchmark",
        "",
        f"Written by `python bench/bench_spine.py{' --quick' if config.mode == 'quick' else ''}` "
        f"({config.mode} mode) on {results.started:%Y-%m-%d %H:%M} UTC; the whole run took "
        f"{results.elapsed_s / 60:.1f} min. See `bench/README.md` for what each figure means.",
        "",
        "## Machine & method",
        "",
        f"{os.cpu_count()} cores (Ray given 2 CPUs), "
        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB RAM, "
        f"{platform.system()} {platform.machine()}, Python {platform.python_version()}; "
        f"{_versions()}. The machine is shared and noisy: read the ratios measured side by side "
        "in this run, not the absolute rates. Inputs: the 4 shared `warc/*.warc.gz` files "
        f"({results.warc_cold[0].bytes_in / MB:.2f} MB compressed, "
        f"{results.warc_decompressed_bytes / MB:.2f} MB decompressed, "
        f"{warc[0].docs_in} records, {payload / MB:.2f} MB of record payload), run "
        f"{config.warc_repeats}× in fresh FM_HOMEs after one cold run; and {config.repeats} "
        f"generated JSONL batches of {config.big_docs:,} distinct documents each "
        f"({results.big_file_bytes / MB:.1f} MB; every WARC page's extracted text with shuffled "
        "lines under a unique header line). Each figure is the median of the repeats "
        "(min–max in brackets); every timed `run_stage` did real work (none short-circuited). "
        "Ray start-up is excluded and reported below; the tokenizer is GPT-NeoX-20B. "
        f"Load average (1 min) {results.load_before[0]:.1f} at the start, "
        f"{results.load_after[0]:.1f} at the end, on {os.cpu_count()} cores.",
        "",
        "## 1. End-to-end stages",
        "",
        "MB in: landed file bytes for `raw_documents` (compressed for WARC), record payload bytes "
        "for `extracted_documents`, UTF-8 text bytes for the last two. The phase column splits "
        "each call at its progress messages: lookups + Iceberg read / Ray tasks / combine + "
        "Iceberg commits. JSONL documents are text, so `extracted_documents` only decodes and "
        "checks them (no trafilatura), and `raw_documents` parses the one landed file in one "
        "Ray task (its unit of parallelism is a file).",
        "",
        "| input | stage | docs in | docs kept | MB in | seconds | docs/s | MB/s "
        "| read / Ray / commit s |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
        *_stage_rows("WARC", results.warc_runs),
        *_stage_rows("JSONL", results.big_runs),
        "",
        f"One-time costs, not in the rows above: Ray start-up {results.ray_start_s:.1f} s; "
        f"the first (cold) WARC pipeline took {sum(t.seconds for t in results.warc_cold):.1f} s "
        f"against {median([sum(t.seconds for t in r) for r in results.warc_runs]):.1f} s warm "
        "(Ray worker processes start and import on first use); "
        f"`import streaming` {results.streaming_import_s:.1f} s; "
        f"`create_version` over one JSONL batch {results.version_s:.2f} s.",
        "",
        *_tokenize_section(results),
        *_shard_section(results),
    ]
    return "\n".join(lines) + "\n"


def _tokenize_section(results: Results) -> list[str]:
    pairs = results.pairs
    ratio = median([p.ratio for p in pairs])
    verdict = "meets" if ratio >= TOKENIZE_TARGET else "misses"
    lines = [
        "## 2. Tokenize stage vs the library",
        "",
        'A = `run_stage(settings, "tokenized_documents", batch)` on a fresh batch (lookups, '
        "Iceberg read, Ray tasks with one tokenizer thread per worker, Arrow, Iceberg commits); "
        "B = `Tokenizer.encode_batch(texts, add_special_tokens=False)` on the very same texts "
        "in the driver with `TOKENIZERS_PARALLELISM=true` (both cores), right after A. "
        "Ratio = B seconds / A seconds: stage throughput over library throughput on identical "
        f"work; target ≥ {TOKENIZE_TARGET}. A's tokens include one EOS per document. "
        "CPU s: CPU seconds of this process and all its descendants (Ray's daemons and workers) "
        "during A or B, read from /proc; B CPU/wall near 2.0 means B had both cores to itself. "
        "CPU ratio = B CPU s / A CPU s: how much CPU the stage spends per unit of the library's "
        "work, which the machine's other tenants disturb far less than wall time. "
        "Inside the stage each worker calls `encode_batch_fast` (the same ids, no offset "
        "tracking), which is part of why A can match B: with plain `encode_batch` in the stage "
        "an earlier run measured a ratio of 0.82.",
        "",
        "| pair | docs | text MB | tokens | A s | B s | A M tok/s | B M tok/s | A CPU s "
        "| B CPU s | B CPU/wall | ratio | CPU ratio |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for n, p in enumerate(pairs, 1):
        lines.append(
            f"| {n} | {p.docs:,} | {p.text_bytes / MB:.2f} | {p.raw_tokens:,} | {p.stage_s:.2f} "
            f"| {p.raw_s:.2f} | {p.stage_tokens / p.stage_s / 1e6:.3f} "
            f"| {p.raw_tokens / p.raw_s / 1e6:.3f} | {p.stage_cpu_s:.2f} | {p.raw_cpu_s:.2f} "
            f"| {p.raw_cpu_s / p.raw_s:.2f} | {p.ratio:.2f} | {p.cpu_ratio:.2f} |"
        )
    stage_s, raw_s = median([p.stage_s for p in pairs]), median([p.raw_s for p in pairs])
    tokens = median([p.raw_tokens for p in pairs])
    busy = median([p.raw_cpu_s / p.raw_s for p in pairs])
    cpu_ratio = median([p.cpu_ratio for p in pairs])
    lines += [
        f"| **median** | | | | {stage_s:.2f} | {raw_s:.2f} | {tokens / stage_s / 1e6:.3f} "
        f"| {tokens / raw_s / 1e6:.3f} | {median([p.stage_cpu_s for p in pairs]):.2f} "
        f"| {median([p.raw_cpu_s for p in pairs]):.2f} | {busy:.2f} | **{ratio:.2f}** "
        f"| **{cpu_ratio:.2f}** |",
        "",
        f"The stage {verdict} the {TOKENIZE_TARGET} target (median of the per-pair ratios "
        f"{ratio:.2f}; CPU ratio {cpu_ratio:.2f}). Ray runs its workers at niceness "
        f"{results.worker_niceness} (Ray's `worker_niceness`), the driver at "
        f"{os.nice(0)}"
        + (
            ": when other tenants load the machine, A's workers yield to them and B does not."
            if results.worker_niceness > os.nice(0)
            else ": A's workers and B compete for the cores on equal terms."
        ),
        "",
        *_profile_lines(results),
    ]
    return lines


def _profile_lines(results: Results) -> list[str]:
    prof = results.profile
    timings = [run[-1] for run in results.big_runs]
    stage_s = median([t.seconds for t in timings])
    stage_cpu = median([p.stage_cpu_s for p in results.pairs])
    raw_cpu = median([p.raw_cpu_s for p in results.pairs])
    phases = [
        ("lookups + Iceberg read (call → “input rows”)", [t.read_s for t in timings]),
        ("Ray tasks (→ last “chunks”)", [t.ray_s for t in timings]),
        ("combine + 3 Iceberg commits (→ return)", [t.commit_s for t in timings]),
    ]
    alone = [
        ("up-to-date `run_stage` (manifest, stage_runs ×2, default tokenizer)", "lookups"),
        ("`catalog.read_batch` of the normalized partition", "read"),
        (f"Ray phase replayed: {int(prof['replay_chunks'])} `process` tasks, `ray.get`", "replay"),
        ("`catalog.replace_rows` of the tokenized partition (same rows)", "commit"),
    ]
    pieces_cpu = sum(prof[f"{key}_cpu"] for _, key in alone)
    split = prof["split_process_s"]
    lines = [
        "Where the stage's time goes, in three views of the last JSONL batch. **Phases**: the A "
        "runs' own progress messages (median wall seconds, share of the stage). **Pieces**: "
        "each part of A run again on its own, with wall and process-tree CPU seconds; their CPU "
        "adds up to what A spends, to compare with B's. **Inside `process`**: thread CPU "
        "seconds in the workers on the first "
        f"{int(prof['split_docs']):,} documents ({int(prof['split_chunks'])} chunks).",
        "",
        "| view | piece | wall s | CPU s | share |",
        "|---|---|--:|--:|--:|",
    ]
    for name, values in phases:
        value = _median_present(values)
        shown = "n/a | | " if value is None else f"{value:.2f} | | {value / stage_s:.0%}"
        lines.append(f"| phase | {name} | {shown} |")
    lines.append(
        f"| phase | **whole stage (A, median)** | {stage_s:.2f} | {stage_cpu:.2f} | 100% |"
    )
    for name, key in alone:
        wall, cpu = prof[f"{key}_s"], prof[f"{key}_cpu"]
        lines.append(
            f"| pieces | {name} | {wall:.2f} | {cpu:.2f} | {cpu / pieces_cpu:.0%} of CPU |"
        )
    wall = prof["replay_s"]
    gaps = [
        (
            "replay wall − busiest worker's `process` time: scheduling, shipping",
            wall - prof["replay_busy_max_s"],
        ),
        (
            "busiest worker − average worker: uneven chunks",
            prof["replay_busy_max_s"] - prof["replay_busy_mean_s"],
        ),
    ]
    for name, value in gaps:
        lines.append(f"| pieces | {name} | {value:.2f} | | {value / wall:.0%} of replay |")
    lines.append(f"| pieces | **sum of the pieces** | | {pieces_cpu:.2f} | B: {raw_cpu:.2f} |")
    inside = [
        ("`encode_batch`", prof["split_encode_s"]),
        ("`Encoding.ids` → Python lists", prof["split_ids_s"]),
        ("the rest: numpy, Arrow lists, `split_kept`", max(0.0, split - prof["split_encode_s"])),
        ("**all of `TokenizeStage.process`**", split),
    ]
    for name, value in inside:
        lines.append(f"| inside `process` | {name} | | {value:.2f} | {value / split:.0%} |")
    lines += [
        "",
        f"Partition sizes in Arrow: input {prof['input_mb']:.1f} MB, output "
        f"{prof['output_mb']:.1f} MB (the text column is carried into `tokenized_documents`). "
        f"Idle, this process and Ray's daemons use {results.idle_cores:.2f} of a core "
        "(measured after Ray started); that is in both A's and B's CPU seconds.",
        "",
    ]
    return lines


def _median_present(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return median(present) if present else None


def _shard_section(results: Results) -> list[str]:
    runs = results.shard_runs
    rows = [
        ("`build_shard_set` (version read, pack, write, register)", "build_s", "build_bytes"),
        ("`write_shard_set` alone (pre-packed sequences)", "write_s", "write_bytes"),
        ("`ndarray.tofile` of the same token bytes (page cache)", "tofile_s", "tofile_bytes"),
        ("`ndarray.tofile` + `fsync` (disk)", "fsync_s", "tofile_bytes"),
    ]
    lines = [
        "## 3. MDS shard write",
        "",
        f"One version over the first JSONL batch: {results.shard_samples:,} samples of "
        f"{SEQ_LEN} tokens ({results.shard_tokens:,} real tokens, uint16). Interleaved per repeat: "
        "`build_shard_set` on a new version key over the same batch, the bare `write_shard_set` "
        "on the same packed sequences, then `tofile` of the padded (samples × seq_len) uint16 "
        f"array without and with `fsync` (median of {results.config.tofile_inner} calls each). "
        "MDSWriter does not fsync, so plain `tofile` is the like-for-like limit. MB/s counts "
        "shard bytes (array bytes for `tofile`); ratios are per-repeat MB/s over the limit's "
        "MB/s, median.",
        "",
        "| what | seconds | MB written | MB/s | ÷ tofile | ÷ tofile+fsync |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for name, time_key, bytes_key in rows:
        seconds = [getattr(r, time_key) for r in runs]
        mb = getattr(runs[0], bytes_key) / MB

        def ratio(limit: str, time_key: str = time_key, bytes_key: str = bytes_key) -> float:
            return median(
                [
                    (getattr(r, bytes_key) / getattr(r, time_key))
                    / (r.tofile_bytes / getattr(r, limit))
                    for r in runs
                ]
            )

        lines.append(
            f"| {name} | {_seconds(seconds, 3)} | {mb:.2f} | {mb / median(seconds):,.1f} "
            f"| {ratio('tofile_s'):.3f} | {ratio('fsync_s'):.3f} |"
        )
    return [*lines, ""]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller inputs, fewer repeats")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="the Markdown report")
    args = parser.parse_args(argv)
    missing = [p for p in (TOKENIZER_FILE, *WARC_FILES) if not p.is_file()]
    if missing or len(WARC_FILES) != 4:
        raise SystemExit(
            f"shared data missing under {SHARED_DATA}: expected the tokenizer and 4 warc/*.warc.gz "
            f"files next to the repository (found {len(WARC_FILES)} WARCs, missing {missing})"
        )
    # Ray's local token auth is for clusters; this run is one process on one host.
    os.environ["RAY_AUTH_MODE"] = "disabled"
    config = QUICK if args.quick else FULL
    import ray

    with tempfile.TemporaryDirectory(prefix="fm-bench-") as scratch:
        try:
            results = run(config, Path(scratch))
        finally:
            ray.shutdown()
    report = render(results)
    args.output.write_text(report, encoding="utf-8")
    print(report)
    log(f"wrote {args.output}")


if __name__ == "__main__":
    main()
