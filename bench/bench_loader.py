"""fm_loader against upstream `streaming.StreamingDataset` and a raw memmap read, same MDS shards.

One run writes every figure to `bench/results/loader.md`:

    .venv/bin/python bench/bench_loader.py            # full: ~5-7 min (+ ~3 min first build)
    .venv/bin/python bench/bench_loader.py --quick    # fewer samples and repeats: ~4-5 min
    .venv/bin/python bench/bench_loader.py --output /tmp/loader.md

Data: the visible text of the HTML pages of the four shared WARCs (`../shared/data/warc`, read in
place), tokenized with `tokenizers/gpt-neox-20b.json`. Those 53 real pages hold only ~107k
tokens, so each shard set repeats them under distinct doc ids (sha256 of "<page id>:<copy>")
until it has the samples it needs, packs them with `fm_assets.shards.packing.pack_documents`
and writes them with `fm_assets.shards.writer.write_shard_set` (64 MB shards). Built sets are
cached under /tmp/fm_bench_loader/ (a set counts as built when its fm_manifest.json exists) and
rebuilt when missing.

Figures, each measured side by side and interleaved in this one run (medians, min–max):
1. samples/s and tokens/s at seq_len 2048: our per-sample path, our batch path (num_workers=0),
   upstream StreamingDataset (shuffle on/off), and two raw-memmap limits.
2. resume at 0%, 50%, 99% of a 1M-sample epoch (seq_len 32), one source and a 0.7/0.3 mixture,
   ours (make_dataset + load_state_dict + first batch) next to upstream (constructor +
   load_state_dict + first sample).
3. what one trainer process receives from make_loader(batch_size=8, num_workers=2), seq_len 2048,
   and what moving batches out of workers costs on its own.
4. /dev/shm entries (and /tmp lock files) left by ours and by upstream, each in child processes
   that exit normally or are SIGKILLed, and by upstream in this long-lived process.
Then where our time goes: block size and torch thread diagnostics, and cProfile of our paths.
Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import gc
import hashlib
import json
import logging
import math
import multiprocessing
import os
import pickle
import platform
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch.utils.data

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.loader_sets: the tests' WARC text extraction

from fm_assets.shards.packing import pack_documents  # noqa: E402
from fm_assets.shards.writer import ShardSetHeader, sequence_tokens, write_shard_set  # noqa: E402
from fm_loader import make_dataset, make_loader, read_manifest  # noqa: E402

SHARED = REPO.parent / "shared" / "data"
WARCS = [
    SHARED / "warc" / name
    for name in (
        "cc-main-2020-34-sample.warc.gz",
        "wget-sample-0000.warc.gz",
        "wget-sample-0001.warc.gz",
        "cc-main-2024-22-whirlwind.warc.gz",
    )
]
TOKENIZER = SHARED / "tokenizers" / "gpt-neox-20b.json"
CACHE = Path("/tmp/fm_bench_loader")
DEFAULT_OUTPUT = REPO / "bench" / "results" / "loader.md"
BUILD_VERSION = "v1"  # bump when the way sets are built changes: new cache directories
BATCH = 8
SEED = 0
UPSTREAM_SEED = 9176  # StreamingDataset's default shuffle_seed
Docs = dict[str, npt.NDArray[Any]]


@dataclass(frozen=True)
class SetSpec:
    """A cached shard set: at least `samples` samples of `seq_len`, from copies `first_copy`..."""

    name: str
    seq_len: int
    samples: int
    first_copy: int  # sets built from disjoint copy ranges share no doc id

    @property
    def directory(self) -> Path:
        return CACHE / f"{self.name}-s{self.seq_len}-n{self.samples}-{BUILD_VERSION}"


THROUGHPUT = SetSpec("warc-neox", 2048, 32_768, 0)
RESUME_A = SetSpec("warc-neox-a", 32, 1_000_000, 0)
RESUME_B = SetSpec("warc-neox-b", 32, 300_000, 1_000_000)


@dataclass(frozen=True)
class Plan:
    repeats: int  # figures 1 and 2
    measured_samples: int  # per path per repeat, figure 1
    warm_samples: int  # the untimed first pass of each path, figure 1
    feed_repeats: int  # figure 3
    feed_batches: int  # per run, figure 3
    profile_samples: int


FULL = Plan(5, measured_samples=6144, warm_samples=1024, feed_repeats=3, feed_batches=600,
            profile_samples=4096)  # fmt: skip
QUICK = Plan(3, measured_samples=2048, warm_samples=512, feed_repeats=2, feed_batches=300,
             profile_samples=2048)  # fmt: skip


# -- data -------------------------------------------------------------------------------------
def real_documents() -> tuple[Docs, dict[str, Any]]:
    """Token ids of every WARC page's visible text, keyed by the page's sha256."""
    from tokenizers import Tokenizer

    from tests.loader_sets import warc_texts

    texts: dict[str, str] = {}
    for warc in WARCS:
        texts.update(warc_texts(warc))
    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    encoded = tokenizer.encode_batch(list(texts.values()))
    docs = {d: np.asarray(e.ids, dtype=np.int32) for d, e in zip(texts, encoded, strict=True)}
    info = {
        "vocab": tokenizer.get_vocab_size(),
        "pad": tokenizer.token_to_id("<|padding|>"),
        "tokenizer_hash": hashlib.sha256(TOKENIZER.read_bytes()).hexdigest(),
    }
    return docs, info


def build_set(spec: SetSpec, base: Docs, info: dict[str, Any]) -> float:
    """Write `spec`'s shard set into the cache; returns the seconds it took."""
    started = time.perf_counter()
    total = sum(len(t) for t in base.values())
    copies = math.ceil(spec.samples * spec.seq_len / total)
    while True:
        docs = {
            hashlib.sha256(f"{d}:{k}".encode()).hexdigest(): tokens
            for k in range(spec.first_copy, spec.first_copy + copies)
            for d, tokens in base.items()
        }
        seqs = pack_documents([(d, len(t)) for d, t in docs.items()], spec.seq_len, shuffle_seed=0)
        if len(seqs) >= spec.samples:
            break
        copies += max(1, copies // 20)  # packing left room: a few more copies
    version = f"bench-{spec.name}@v1"
    header = ShardSetHeader(
        shard_set_key=f"{version}/{info['tokenizer_hash'][:12]}-s{spec.seq_len}",
        source_version=version,
        version_content_hash=hashlib.sha256(version.encode()).hexdigest(),
        tokenizer_hash=info["tokenizer_hash"],
    )
    # Write beside the final directory and rename: a killed build never looks complete.
    partial = spec.directory.with_name(spec.directory.name + f".partial-{os.getpid()}")
    write_shard_set(
        ((s, sequence_tokens(s, docs)) for s in seqs),
        str(partial),
        seq_len=spec.seq_len,
        vocab_size=info["vocab"],
        pad_token_id=info["pad"],
        header=header,
    )
    partial.rename(spec.directory)
    return time.perf_counter() - started


def ensure_sets(specs: list[SetSpec]) -> dict[str, float]:
    """Build the specs missing from the cache; {name: build seconds} of those built now."""
    missing = [s for s in specs if not (s.directory / "fm_manifest.json").exists()]
    built: dict[str, float] = {}
    if not missing:
        return built
    base, info = real_documents()
    CACHE.mkdir(parents=True, exist_ok=True)
    for spec in missing:
        print(f"building {spec.directory} ...", flush=True)
        built[spec.name] = build_set(spec, base, info)
    return built


def write_flat_tokens(spec: SetSpec) -> Path:
    """The set's input_ids, [samples, seq_len] uint16 in sample order, written once with tofile."""
    path = spec.directory / "input_ids.flat.u16"
    if path.exists():
        return path
    manifest = read_manifest(spec.directory)
    partial = path.with_name(path.name + f".partial-{os.getpid()}")
    with open(partial, "wb") as out:
        for shard in manifest.shards:
            for tokens in shard_token_rows(spec.directory / shard.name, spec.seq_len, 2):
                tokens.tofile(out)
    partial.rename(path)
    return path


def shard_token_rows(path: Path, seq_len: int, itemsize: int) -> Iterator[npt.NDArray[Any]]:
    """Each sample's input_ids, in order, as a view of one np.memmap of the MDS shard file.

    MDS joint shard: uint32 sample count, count + 1 uint32 sample end offsets, samples; the
    fixed-size input_ids column is the last one, so its bytes end each sample.
    """
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    count = int(mapped[:4].view(np.uint32)[0])
    ends = mapped[8 : 8 + 4 * count].view(np.uint32).tolist()
    width = seq_len * itemsize
    for end in ends:
        yield mapped[end - width : end].view(np.uint16)


def page_in(paths: list[Path]) -> None:
    """Read files once so every path below reads from the page cache, none from disk."""
    for path in paths:
        with open(path, "rb") as f:
            while f.read(16 << 20):
                pass


# -- upstream ---------------------------------------------------------------------------------
def quiet_upstream() -> None:
    logging.getLogger("streaming").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="streaming")


UPSTREAM_CLOSED = 0  # StreamingDatasets this process made and closed


def close_upstream(ds: Any) -> None:
    """Stop a StreamingDataset's background threads and clean its shared memory, as far as
    upstream lets us.

    Upstream has no public close: an iteration abandoned early leaves its download/ready threads
    polling (and the dataset alive); `_iterator.exit()` and the executor's shutdown stop them.
    Its /dev/shm blocks outlive the object, so clean_stale_shared_memory() runs after each use
    (section 4 reports how much that actually removes).
    """
    from streaming.base.util import clean_stale_shared_memory

    global UPSTREAM_CLOSED
    UPSTREAM_CLOSED += 1
    iterator = getattr(ds, "_iterator", None)
    if iterator is not None:
        iterator.exit()
    executor = getattr(ds, "_executor", None)
    if executor is not None:
        executor.shutdown(wait=True)
    del ds
    gc.collect()
    clean_stale_shared_memory()


# -- 1. throughput ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Read:
    """One path opening the set and reading its first samples."""

    open_s: float  # make_dataset / StreamingDataset constructor
    read_s: float  # wall seconds for the samples
    verify_s: float  # of which ours mapped and sha256-checked shards on first use (else 0)
    cpu_s: float  # process CPU seconds, all threads, while reading

    @property
    def steady_s(self) -> float:
        return self.read_s - self.verify_s


def take(items: Iterator[Any], n: int, count: Callable[[Any], int]) -> None:
    """Consume `items` until `count` of them add up to n samples."""
    seen = 0
    for item in items:
        seen += count(item)
        if seen >= n:
            return
    raise RuntimeError(f"the set ran out after {seen} of {n} samples")


def one(_: Any) -> int:
    return 1


def batch_len(batch: Any) -> int:
    return len(batch["sample_index"])


def read_timed(open_: Callable[[], Any], read: Callable[[Any], float]) -> Read:
    """open_() -> handle; read(handle) reads the samples and returns the first-use verify s."""
    t0 = time.perf_counter()
    handle = open_()
    t1, c1 = time.perf_counter(), time.process_time()
    verify = read(handle)
    t2, c2 = time.perf_counter(), time.process_time()
    return Read(t1 - t0, t2 - t1, verify, c2 - c1)


def ours_samples(directory: Path, window: int, n: int) -> Read:
    def read(ds: Any) -> float:
        take(iter(ds), n, one)
        return sum(ds.take_fetch_latencies())

    return read_timed(
        lambda: make_dataset(
            str(directory), rank=0, world_size=1, seed=SEED, shuffle_window=window
        ),
        read,
    )


def ours_batches(directory: Path, n: int) -> Read:
    def read(loader: Any) -> float:
        batches = iter(loader)
        take(batches, n, batch_len)
        del batches  # closes the generator: stops the loader's prefetch thread
        return float(loader.metrics.fetch_s_total)

    return read_timed(
        lambda: make_loader(
            make_dataset(str(directory), rank=0, world_size=1, seed=SEED),
            batch_size=BATCH,
            num_workers=0,
        ),
        read,
    )


def upstream_samples(directory: Path, shuffle: bool, n: int) -> Read:
    from streaming import StreamingDataset

    def read(ds: Any) -> float:
        take(iter(ds), n, one)
        return 0.0

    handle: list[Any] = []

    def open_() -> Any:
        handle.append(
            StreamingDataset(
                local=str(directory), shuffle=shuffle, batch_size=BATCH, shuffle_seed=UPSTREAM_SEED
            )
        )
        return handle[0]

    result = read_timed(open_, read)
    close_upstream(handle.pop())
    return result


def limit_memmap_samples(directory: Path, n: int) -> Read:
    """One np.memmap per shard file; each sample's input_ids bytes sliced in order -> int64."""
    manifest = read_manifest(directory)

    def read(_: Any) -> float:
        rows = (
            torch.from_numpy(row.astype(np.int64))
            for shard in manifest.shards
            for row in shard_token_rows(directory / shard.name, manifest.seq_len, 2)
        )
        take(rows, n, one)
        return 0.0

    return read_timed(lambda: None, read)


def limit_flat_batches(flat: Path, seq_len: int, n: int) -> Read:
    """A flat [samples, seq_len] uint16 file, np.memmap'd, read BATCH rows at a time -> int64."""

    def read(_: Any) -> float:
        tokens = np.memmap(flat, dtype=np.uint16, mode="r").reshape(-1, seq_len)
        rows = (
            torch.from_numpy(tokens[a : a + BATCH].astype(np.int64))
            for a in range(0, len(tokens), BATCH)
        )
        take(rows, n, len)
        return 0.0

    return read_timed(lambda: None, read)


THROUGHPUT_PATHS = {
    "ours_sample": "ours, per sample: `for s in make_dataset(dir, shuffle_window=65536)`",
    "ours_sample_w1": "ours, per sample, `shuffle_window=1` (shards permuted, samples in order)",
    "ours_batch": f"ours, batches: `make_loader(ds, batch_size={BATCH}, num_workers=0)`",
    "upstream_shuffle": f"upstream `StreamingDataset(shuffle=True, batch_size={BATCH})`",
    "upstream_sequential": f"upstream `StreamingDataset(shuffle=False, batch_size={BATCH})`",
    "limit_memmap": "limit, per sample: np.memmap per shard file, input_ids bytes in order → int64",
    "limit_flat": f"limit, batches: flat `tofile` token file, np.memmap, {BATCH} rows → int64",
}


def throughput(plan: Plan, flat: Path) -> dict[str, list[Read]]:
    """Every path, interleaved, the starting path rotated each repeat."""
    d, seq_len = THROUGHPUT.directory, THROUGHPUT.seq_len
    paths: dict[str, Callable[[int], Read]] = {
        "ours_sample": lambda n: ours_samples(d, 1 << 16, n),
        "ours_sample_w1": lambda n: ours_samples(d, 1, n),
        "ours_batch": lambda n: ours_batches(d, n),
        "upstream_shuffle": lambda n: upstream_samples(d, True, n),
        "upstream_sequential": lambda n: upstream_samples(d, False, n),
        "limit_memmap": lambda n: limit_memmap_samples(d, n),
        "limit_flat": lambda n: limit_flat_batches(flat, seq_len, n),
    }
    names = list(paths)
    for name in names:  # one short untimed pass each: first use of every code path
        paths[name](plan.warm_samples)
    reads: dict[str, list[Read]] = {name: [] for name in names}
    for r in range(plan.repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            reads[name].append(paths[name](plan.measured_samples))
    return reads


# -- 2. resume --------------------------------------------------------------------------------
FRACTIONS = (0.0, 0.5, 0.99)
# Seconds: open, load_state_dict, first batch (or sample), shard map + sha256 inside the first.
Phases = tuple[float, float, float, float]


def mixture_source() -> dict[str, float]:
    return {str(RESUME_A.directory): 0.7, str(RESUME_B.directory): 0.3}


def ours_states(source: Any) -> tuple[int, dict[float, dict[str, Any]], dict[float, float]]:
    """Epoch length, our state at each fraction and the seconds `state_dict` took to make it."""
    states, seconds = {}, {}
    epoch = 0
    for fraction in FRACTIONS:
        ds = make_dataset(source, rank=0, world_size=1, seed=SEED)  # fresh: no cached cursor
        epoch = ds.epoch_length
        started = time.perf_counter()
        states[fraction] = ds.state_dict(consumed_samples=int(fraction * len(ds)))
        seconds[fraction] = time.perf_counter() - started
    return epoch, states, seconds


def ours_resume(source: Any, state: dict[str, Any]) -> Phases:
    t0 = time.perf_counter()
    ds = make_dataset(source, rank=0, world_size=1, seed=SEED)
    t1 = time.perf_counter()
    ds.load_state_dict(state)
    t2 = time.perf_counter()
    loader = make_loader(ds, batch_size=BATCH, num_workers=0)
    batches = iter(loader)
    first = next(batches)
    t3 = time.perf_counter()
    if batch_len(first) != BATCH:
        raise RuntimeError(f"resumed loader gave a batch of {batch_len(first)}")
    del batches
    return t1 - t0, t2 - t1, t3 - t2, loader.metrics.fetch_s_total


def upstream_resume(mixture: bool, fraction: float, epoch_size: int) -> Phases:
    """Constructor, load_state_dict in upstream's own state format, first sample."""
    from streaming import Stream, StreamingDataset

    t0 = time.perf_counter()
    common = {"shuffle": True, "batch_size": BATCH, "shuffle_seed": UPSTREAM_SEED}
    if mixture:
        streams = [Stream(local=k, proportion=w) for k, w in mixture_source().items()]
        ds = StreamingDataset(streams=streams, epoch_size=epoch_size, **common)
    else:
        ds = StreamingDataset(local=str(RESUME_A.directory), **common)
    t1 = time.perf_counter()
    # What StreamingDataset.state_dict returns in a job of 1 node after N samples of epoch 0.
    ds.load_state_dict(
        {
            "epoch": 0,
            "sample_in_epoch": int(fraction * ds.epoch_size),
            "num_canonical_nodes": 1,
            "shuffle_seed": UPSTREAM_SEED,
            "initial_physical_nodes": 1,
        }
    )
    t2 = time.perf_counter()
    next(iter(ds))
    t3 = time.perf_counter()
    close_upstream(ds)
    return t1 - t0, t2 - t1, t3 - t2, 0.0  # upstream checks no checksum by default


def resume(plan: Plan) -> dict[str, Any]:
    single, mixture = str(RESUME_A.directory), mixture_source()
    epoch_single, states_single, state_s_single = ours_states(single)
    epoch_mix, states_mix, state_s_mix = ours_states(mixture)
    paths: dict[str, Callable[[], Phases]] = {}
    for f in FRACTIONS:
        paths[f"ours|single|{f}"] = lambda f=f: ours_resume(single, states_single[f])
        paths[f"upstream|single|{f}"] = lambda f=f: upstream_resume(False, f, epoch_single)
        paths[f"ours|mixture|{f}"] = lambda f=f: ours_resume(mixture, states_mix[f])
        paths[f"upstream|mixture|{f}"] = lambda f=f: upstream_resume(True, f, epoch_mix)
    names = list(paths)
    for name in names[:4]:  # untimed: first use of each code path
        paths[name]()
    times: dict[str, list[Phases]] = {name: [] for name in names}
    for r in range(plan.repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            times[name].append(paths[name]())
    return {
        "times": times,
        "epoch": {"single": epoch_single, "mixture": epoch_mix},
        "state_s": {"single": state_s_single, "mixture": state_s_mix},
    }


# -- 3. what a trainer receives ----------------------------------------------------------------
@dataclass
class Feed:
    first_batch_s: float
    steady_s: float  # batches 2..N
    real_tokens: int  # batches 2..N
    total_tokens: int
    samples: int
    snapshot: dict[str, float]
    steady_stall: float  # share of batches 2..N's wall time spent waiting for a batch


def trainer_feed(workers: int, batches: int, step_s: float = 0.0) -> Feed:
    """A trainer loop over make_loader(batch_size=8): `step_s` of sleep per batch stands in
    for the training step (0: a trainer that only takes batches)."""
    ds = make_dataset(str(THROUGHPUT.directory), rank=0, world_size=1, seed=SEED)
    loader = make_loader(ds, batch_size=BATCH, num_workers=workers)
    started = time.perf_counter()
    it = iter(loader)
    next(it)
    first = time.perf_counter()
    first_wait = loader.metrics.wait_s
    real = total = samples = 0
    for i, batch in enumerate(it, start=2):
        real += int(batch["num_tokens"].sum())
        total += batch["input_ids"].numel()
        samples += batch_len(batch)
        if step_s:
            time.sleep(step_s)
        if i == batches:
            break
    steady = time.perf_counter() - first
    snapshot = loader.metrics.snapshot()
    stall = (loader.metrics.wait_s - first_wait) / steady
    del it  # stops the prefetch thread and the DataLoader workers
    return Feed(first - started, steady, real, total, samples, snapshot, stall)


class PrebuiltBatches(torch.utils.data.IterableDataset[Any]):
    """Copies of one real batch, no reading: what moving batches out of workers costs alone."""

    def __init__(self, batch: dict[str, Any], count: int, as_numpy: bool) -> None:
        super().__init__()
        self.batch, self.count, self.as_numpy = batch, count, as_numpy

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        for _ in range(self.count // (info.num_workers if info else 1)):
            # A fresh copy each time: a worker moves each new tensor into shared memory once.
            out = {
                k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in self.batch.items()
            }
            if self.as_numpy:
                out = {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in out.items()}
            yield out


def unchanged(batch: Any) -> Any:
    """collate_fn that keeps numpy arrays as they are, so they are pickled through the pipe."""
    return batch


def transfer_only(template: dict[str, Any], batches: int, as_numpy: bool) -> float:
    """Samples/s two DataLoader workers deliver when each batch is a copy of `template`."""
    loader = torch.utils.data.DataLoader(
        PrebuiltBatches(template, batches, as_numpy),
        batch_size=None,
        num_workers=2,
        collate_fn=unchanged if as_numpy else None,
    )
    it = iter(loader)
    next(it)
    started = time.perf_counter()
    count = sum(1 for _ in it)
    elapsed = time.perf_counter() - started
    del it
    return count * BATCH / elapsed


def feed(plan: Plan) -> tuple[dict[str, list[Feed]], dict[str, list[float]]]:
    step = BATCH * THROUGHPUT.seq_len / 1e6  # seconds per batch of a trainer at 1M tokens/s
    paths: dict[str, Callable[[], Feed]] = {
        "workers=2": lambda: trainer_feed(2, plan.feed_batches),
        "workers=0": lambda: trainer_feed(0, plan.feed_batches),
        "workers=2, trainer step = 1M tokens/s": lambda: trainer_feed(
            2, plan.feed_batches // 2, step
        ),
    }
    ds = make_dataset(str(THROUGHPUT.directory), rank=0, world_size=1, seed=SEED, batch_size=BATCH)
    template = next(ds.batch_stream(0, 1))
    transfers: dict[str, Callable[[], float]] = {
        "tensors (torch default: shared memory, one fd per tensor)": lambda: transfer_only(
            template, plan.feed_batches, False
        ),
        "numpy arrays pickled through the pipe (collate_fn keeps them)": lambda: transfer_only(
            template, plan.feed_batches, True
        ),
    }
    runs: dict[str, list[Feed]] = {name: [] for name in paths}
    rates: dict[str, list[float]] = {name: [] for name in transfers}
    for _ in range(plan.feed_repeats):
        for name, fn in paths.items():
            runs[name].append(fn())
        for name, rate in transfers.items():
            rates[name].append(rate())
    return runs, rates


def pickle_check() -> dict[str, Any]:
    """Does the dataset pickle (what a spawn/forkserver DataLoader needs)?"""
    ds = make_dataset(str(THROUGHPUT.directory), rank=0, world_size=1, seed=SEED)
    first = int(next(iter(ds))["sample_index"])  # maps shards: the maps must not travel
    started = time.perf_counter()
    blob = pickle.dumps(ds)
    copy = pickle.loads(blob)
    seconds = time.perf_counter() - started
    same = int(next(iter(copy))["sample_index"]) == first
    return {"bytes": len(blob), "seconds": seconds, "same_first": same}


# -- 4. /dev/shm ------------------------------------------------------------------------------
def shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm"))


def streaming_filelocks() -> set[str]:
    """StreamingDataset's lock files in the temp directory: <6-digit prefix>_<name>_filelock."""
    names = {"barrier_filelock", "cache_filelock"}
    return {e for e in os.listdir(tempfile.gettempdir()) if e[:6].isdigit() and e[7:] in names}


def streaming_names(entries: set[str]) -> list[str]:
    """The entries named like StreamingDataset's blocks: <6-digit prefix>_<block name>."""
    from streaming.base.constant import SHM_TO_CLEAN

    return sorted(e for e in entries if e[:6].isdigit() and e[7:] in SHM_TO_CLEAN)


def shm_child(which: str, how: str) -> None:
    """Run in a child process: read like a trainer, drop the loader, report /dev/shm, then
    exit normally (`exit`) or wait to be SIGKILLed by the parent (`kill`: a crash, an OOM kill,
    a preempted job)."""
    before = shm_entries()
    if which == "ours":
        ds = make_dataset(str(THROUGHPUT.directory), rank=0, world_size=1, seed=SEED)
        take(iter(ds), 2000, one)
        batches = iter(make_loader(ds, batch_size=BATCH, num_workers=2))
        take(batches, 2000, batch_len)
        during = shm_entries()
        del batches, ds
    else:
        quiet_upstream()
        from streaming import StreamingDataset

        ds = StreamingDataset(local=str(THROUGHPUT.directory), shuffle=True, batch_size=BATCH)
        samples = iter(ds)
        take(samples, 2000, one)
        during = shm_entries()
        del samples, ds  # what a user does: upstream has no public close
    gc.collect()
    after_del = shm_entries()
    report = {"while_alive": sorted(during - before), "after_del": sorted(after_del - before)}
    print(json.dumps(report), flush=True)
    if how == "kill":
        time.sleep(600)


def shm_in_this_process(locks_at_start: set[str]) -> dict[str, Any]:
    """What the StreamingDatasets of sections 1-3, each closed, left in this live process."""
    from streaming.base.util import clean_stale_shared_memory

    left = streaming_names(shm_entries())
    clean_stale_shared_memory()
    return {
        "datasets": UPSTREAM_CLOSED,
        "left": left,
        "left_after_clean": streaming_names(shm_entries()),
        "filelocks": sorted(streaming_filelocks() - locks_at_start),
    }


def shm_side_by_side() -> dict[str, dict[str, Any]]:
    """Each loader in a child process, exiting normally and killed; counts by entry name."""
    from streaming.base.util import clean_stale_shared_memory

    out: dict[str, dict[str, Any]] = {}
    for which in ("ours", "upstream"):
        for how in ("exit", "kill"):
            before, locks_before = shm_entries(), streaming_filelocks()
            with tempfile.TemporaryFile("w+") as errors:
                child = subprocess.Popen(
                    [sys.executable, __file__, "--shm-child", which, how],
                    stdout=subprocess.PIPE,
                    stderr=errors,
                    text=True,
                )
                if child.stdout is None:  # for the type checker: PIPE was asked for
                    raise RuntimeError("no pipe to the shm child")
                line = ""
                while not line.startswith("{"):
                    line = child.stdout.readline()
                    if not line:
                        child.wait()
                        errors.seek(0)
                        raise RuntimeError(
                            f"shm child {which}/{how} failed: {errors.read()[-2000:]}"
                        )
                if how == "kill":
                    child.kill()  # SIGKILL: no atexit, no finalizers
                child.wait(timeout=120)
                child.stdout.close()
            time.sleep(2.0)  # let any resource tracker left behind finish its cleanup
            after = shm_entries()
            clean_stale_shared_memory()
            cleaned = shm_entries()
            report = json.loads(line)
            out[f"{which}|{how}"] = {
                "before": len(before),
                "while_alive": report["while_alive"],
                "after_del": report["after_del"],
                "left_streaming": streaming_names(after - before),
                "left_other": sorted(set(after - before) - set(streaming_names(after - before))),
                "left_after_clean": streaming_names(cleaned - before),
                "filelocks": sorted(streaming_filelocks() - locks_before),
            }
    return out


# -- where the time goes ------------------------------------------------------------------------
BLOCK_SIZES = (8, 16, 32, 128)  # 128: fm_loader's current block for the per-sample path


def with_threads(threads: int, fn: Callable[[], float]) -> float:
    """fn() with torch's intra-op thread count set to `threads` for the call."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return fn()
    finally:
        torch.set_num_threads(before)


def per_sample_with_block(block: int, n: int) -> float:
    """Samples/s of `for s in ds` with fm_loader building `block` samples at a time.

    Sets the module's private `_SAMPLES_PER_BLOCK` (read at each `__iter__`) for this call
    only: a diagnostic for the lead, not an API.
    """
    import fm_loader.dataset as fm_dataset

    original = fm_dataset._SAMPLES_PER_BLOCK
    fm_dataset._SAMPLES_PER_BLOCK = block
    try:
        read = ours_samples(THROUGHPUT.directory, 1 << 16, n)
    finally:
        fm_dataset._SAMPLES_PER_BLOCK = original
    return n / read.steady_s


def batch_stream_rate(n: int) -> float:
    """Samples/s of `ds.batch_stream()` in this process: the loader's batches, no DataLoader."""

    def read(ds: Any) -> float:
        take(ds.batch_stream(0, 1), n, batch_len)
        return sum(ds.take_fetch_latencies())

    result = read_timed(
        lambda: make_dataset(
            str(THROUGHPUT.directory), rank=0, world_size=1, seed=SEED, batch_size=BATCH
        ),
        read,
    )
    return n / result.steady_s


def compare_seconds(elements: int) -> list[float]:
    """Seconds of each of 100 `tensor != -100` on `elements` int64s (Block's loss_mask op),
    2 ms apart, as between blocks."""
    tensor = torch.zeros(elements, dtype=torch.int64)
    times = []
    for _ in range(100):
        time.sleep(0.002)
        started = time.perf_counter()
        _ = tensor != -100
        times.append(time.perf_counter() - started)
    return times


def diagnostics(plan: Plan) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Side by side, interleaved: the per-sample path by block size and torch thread count, the
    batch path with and without the DataLoader around it, and one torch comparison."""
    n = plan.profile_samples
    default = torch.get_num_threads()
    paths: dict[str, Callable[[], float]] = {}
    for threads in (default, 1):
        for b in BLOCK_SIZES:
            name = f"`for s in ds`, blocks of {b}{' (current)' if b == 128 else ''}, "
            paths[name + f"torch threads {threads}"] = lambda b=b, t=threads: with_threads(
                t, lambda: per_sample_with_block(b, n)
            )
    paths[f"`ds.batch_stream()`, batches of {BATCH}, no DataLoader"] = lambda: batch_stream_rate(n)
    for threads in (default, 1):
        paths[f"`make_loader(ds, batch_size={BATCH}, num_workers=0)`, torch threads {threads}"] = (
            lambda t=threads: with_threads(
                t, lambda: n / ours_batches(THROUGHPUT.directory, n).steady_s
            )
        )
    compares: dict[str, Callable[[], float]] = {
        f"{elements:,} elements, torch threads {threads}": (
            lambda e=elements, t=threads: with_threads(t, lambda: compare_seconds(e))
        )
        for elements in (1 << 15, 128 * THROUGHPUT.seq_len)
        for threads in (default, 1)
    }
    names = list(paths)
    rates: dict[str, list[float]] = {name: [] for name in names}
    seconds: dict[str, list[float]] = {name: [] for name in compares}  # every call
    for r in range(plan.feed_repeats + 1):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            rates[name].append(paths[name]())
        for name, fn in compares.items():
            seconds[name] += fn()
    return rates, seconds


ProfileRows = list[tuple[str, int, float, float]]


def profile_ours(n: int, window: int, batches: bool) -> tuple[float, ProfileRows]:
    """cProfile of our per-sample iteration or of `batch_stream` (what a DataLoader worker
    runs) over n samples, shards already mapped and verified; the top entries by own time."""
    ds = make_dataset(
        str(THROUGHPUT.directory),
        rank=0,
        world_size=1,
        seed=SEED,
        shuffle_window=window,
        batch_size=BATCH,
    )

    def run() -> None:
        if batches:
            take(ds.batch_stream(0, 1), n, batch_len)
        else:
            take(iter(ds), n, one)

    run()  # maps and verifies the shards outside the profile
    profiler = cProfile.Profile()
    profiler.enable()
    run()
    profiler.disable()
    stats = pstats.Stats(profiler)
    rows = []
    for (path, line, func), (_, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{Path(path).name}:{line}({func})" if line else func
        rows.append((where, calls, own, cumulative))
    rows.sort(key=lambda r: -r[2])
    return stats.total_tt, rows  # type: ignore[attr-defined]


# -- report -----------------------------------------------------------------------------------
def med(values: list[float]) -> float:
    return statistics.median(values)


def spread(values: list[float], fmt: str = ",.0f") -> str:
    return f"{med(values):{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"


def met(ok: bool) -> str:
    return "met" if ok else "**NOT met**"


def set_row(spec: SetSpec, built: dict[str, float]) -> str:
    m = read_manifest(spec.directory)
    size = sum(s.bytes for s in m.shards)
    how = f"built in this run, {built[spec.name]:.0f} s" if spec.name in built else "cached"
    return (
        f"| `{spec.directory.name}` | {m.seq_len} | {m.num_samples:,} | {m.num_tokens:,} | "
        f"{m.packing_efficiency:.3f} | {len(m.shards)} | {size / 1e6:,.0f} MB | "
        f"{m.num_documents:,} | {how} |"
    )


def machine_line() -> str:
    import streaming

    cpu = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} CPUs ({cpu}), {memory:.0f} GiB, Linux, Python "
        f"{platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}, "
        f"mosaicml-streaming {streaming.__version__}"
    )


def throughput_section(reads: dict[str, list[Read]], plan: Plan) -> list[str]:
    m = read_manifest(THROUGHPUT.directory)
    n, seq_len, eff = plan.measured_samples, m.seq_len, m.packing_efficiency
    rates = {k: [n / r.steady_s for r in v] for k, v in reads.items()}
    cpu_rates = {k: [n / r.cpu_s for r in v] for k, v in reads.items()}
    rate = {k: med(v) for k, v in rates.items()}
    up, up_seq = rate["upstream_shuffle"], rate["upstream_sequential"]
    limit_of = {k: "limit_flat" if k == "ours_batch" else "limit_memmap" for k in rates}
    lines = [
        "## 1. Throughput, seq_len 2048, one process",
        "",
        f"Set `{THROUGHPUT.directory.name}`. Each path opens the set afresh and reads its first "
        f"{n:,} samples; {plan.repeats} repeats, all paths interleaved (first path rotated each "
        f"repeat) after one untimed pass of {plan.warm_samples:,} samples each; every file "
        "already in the page cache. samples/s: medians (min–max). tokens/s = samples/s × 2048 "
        f"(positions, padding included); real tokens/s = that × the set's packing efficiency "
        f"{eff:.3f}. Our first use of each shard in a new dataset maps it and checks its "
        "sha256 (upstream checks nothing by default): that time is taken out of the rate and "
        "shown on its own. `open` = `make_dataset` / the StreamingDataset constructor, not in "
        "the rate either. CPU/wall: process CPU time (all threads) over wall time while reading;"
        " below 1 for a one-thread path means other jobs took the core.",
        "",
        "| path | samples/s | tokens/s | real tokens/s | × upstream shuffled | "
        "× upstream sequential | share of its limit | CPU/wall | open s | map + sha256 s |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for key, label in THROUGHPUT_PATHS.items():
        r = rate[key]
        share = "—" if key.startswith("limit") else f"{r / rate[limit_of[key]]:.1%}"
        cpu_wall = med([x.cpu_s / x.read_s for x in reads[key]])
        verify = med([x.verify_s for x in reads[key]])
        lines.append(
            f"| {label} | {spread(rates[key])} | {r * seq_len / 1e6:.2f} M | "
            f"{r * seq_len * eff / 1e6:.2f} M | {r / up:.2f}× | {r / up_seq:.2f}× | {share} | "
            f"{cpu_wall:.2f} | {med([x.open_s for x in reads[key]]):.3f} | "
            f"{verify:.3f} |"
        )
    sample_ratio, batch_ratio = rate["ours_sample"] / up, rate["ours_batch"] / up
    cpu_ratio = med(cpu_rates["ours_sample"]) / med(cpu_rates["upstream_shuffle"])
    cpu_batch = med(cpu_rates["ours_batch"]) / med(cpu_rates["upstream_shuffle"])
    with_verify = med([n / x.read_s for x in reads["ours_sample"]]) / up
    lines += [
        "",
        f"Issue goal, ours ≥ 5× upstream (both shuffled, as in training): per-sample path "
        f"**{sample_ratio:.2f}×** ({met(sample_ratio >= 5)}), batch path **{batch_ratio:.2f}×**"
        f" ({met(batch_ratio >= 5)}). Per CPU second instead of wall second: "
        f"{cpu_ratio:.2f}× and {cpu_batch:.2f}×. Counting our first-use sha256 in the rate, the"
        f" per-sample path is {with_verify:.2f}× upstream over these {n:,} samples. Ratio to "
        f"the limit: per-sample path at {rate['ours_sample'] / rate['limit_memmap']:.1%} of the"
        f" per-sample memmap read, batch path at "
        f"{rate['ours_batch'] / rate['limit_flat']:.1%} of the flat-file batch read. The limits"
        " produce input_ids only (int64), in stored order; ours also builds labels, loss_mask,"
        " position_ids, cu_seqlens and doc ids in shuffled order, and upstream decodes all "
        "three MDS columns.",
        "",
    ]
    return lines


def resume_section(res: dict[str, Any], plan: Plan) -> list[str]:
    times: dict[str, list[Phases]] = res["times"]
    lines = [
        "## 2. Resume",
        "",
        f"One source: `{RESUME_A.directory.name}`, {res['epoch']['single']:,} samples per epoch."
        f" Mixture: {{A: 0.7, B: 0.3}}, B = `{RESUME_B.directory.name}`; "
        f"{res['epoch']['mixture']:,} samples per epoch for ours, and upstream's `epoch_size` "
        "is set to the same number (`Stream(local=..., proportion=0.7 / 0.3)`). "
        "**Ours**: `make_dataset` (open) + `load_state_dict(state)` with `state = "
        "ds.state_dict(consumed_samples=N)` taken beforehand + "
        f"`next(iter(make_loader(ds, batch_size={BATCH})))`, shuffle_window 65536. "
        "**Upstream**: `StreamingDataset(local=... | streams=..., shuffle=True, batch_size=8)` "
        "(open) + `load_state_dict({'epoch': 0, 'sample_in_epoch': N, "
        "'num_canonical_nodes': 1, 'shuffle_seed': 9176, 'initial_physical_nodes': 1})` "
        "(the keys its own `state_dict` returns, streaming/base/dataset.py; it only stores them "
        "in shared memory, `__iter__` does the work) + `next(iter(ds))`. Same process, imports "
        f"done, files in the page cache; {plan.repeats} repeats, interleaved after one untimed "
        "call of each kind; seconds, medians (min–max).",
        "",
        "| loader | source | at | open s | load_state_dict s | first batch / sample s | "
        "of which shard map + sha256 | total s | total without map + sha256 |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    totals: dict[str, float] = {}
    bare: dict[str, float] = {}
    for name, runs in times.items():
        loader, source, fraction = name.split("|")
        total = [sum(r[:3]) for r in runs]
        without = [sum(r[:3]) - r[3] for r in runs]
        totals[name], bare[name] = med(total), med(without)
        verify = spread([r[3] for r in runs], ".3f") if loader == "ours" else "—"
        lines.append(
            f"| {loader} | {source} | {float(fraction):.0%} | "
            f"{spread([r[0] for r in runs], '.3f')} | {spread([r[1] for r in runs], '.4f')} | "
            f"{spread([r[2] for r in runs], '.3f')} | {verify} | {spread(total, '.3f')} | "
            f"{spread(without, '.3f')} |"
        )
    lines += ["", "Issue requirement, ours at 99% ≤ 1.5× ours at 0%:", ""]
    for source in ("single", "mixture"):
        ours = totals[f"ours|{source}|0.99"] / totals[f"ours|{source}|0.0"]
        ours_bare = bare[f"ours|{source}|0.99"] / bare[f"ours|{source}|0.0"]
        theirs = totals[f"upstream|{source}|0.99"] / totals[f"upstream|{source}|0.0"]
        speed = totals[f"upstream|{source}|0.99"] / totals[f"ours|{source}|0.99"]
        lines.append(
            f"- {source}: ours 99% / 0% = **{ours:.2f}×** total ({met(ours <= 1.5)}), "
            f"{ours_bare:.2f}× without the shard check ({met(ours_bare <= 1.5)}); upstream "
            f"{theirs:.2f}×; at 99% ours is {speed:.1f}× faster than upstream."
        )
    state_s = res["state_s"]
    lines += [
        "",
        "Our first batch after a resume is mostly the sha256 of the shard(s) under the first "
        "window (64 MB each; the last shard of a set is smaller, so a position that lands in it "
        "resumes faster); the schedule and window permutation cost milliseconds at any "
        "position. Upstream's first sample waits for its whole-epoch partition and shuffle "
        "(O(samples)).",
        "",
        "Making the state, `ds.state_dict(consumed_samples=N)` on a fresh dataset (one run "
        "each): "
        + "; ".join(
            f"{source}: " + ", ".join(f"{f:.0%} {s:.3f} s" for f, s in state_s[source].items())
            for source in ("single", "mixture")
        )
        + ". A mixture's state walks the quota schedule from the last restart in Python, "
        "position by position (one source: O(1)); a trainer that checkpoints periodically pays "
        "only the walk since its previous `state_dict` (the cursor is kept).",
        "",
    ]
    return lines


def feed_section(
    runs: dict[str, list[Feed]], transfers: dict[str, list[float]], pickled: dict[str, Any]
) -> list[str]:
    seq_len = THROUGHPUT.seq_len
    repeats = len(next(iter(runs.values())))
    lines = [
        f"## 3. What one trainer process receives, seq_len 2048, batch_size {BATCH}",
        "",
        f"`make_loader(make_dataset(dir), batch_size={BATCH}, num_workers=W)` on "
        f"`{THROUGHPUT.directory.name}`. Rates over batches 2..N; the first batch (starting "
        "the workers, each mapping and checking its shards) is shown on its own. The last four "
        "columns are `loader.metrics.snapshot()` at the end of each run (medians): "
        "stall_fraction, prefetch_depth, shard_fetches, shard_fetch_mean_s; the column before "
        "them is the same wait share over batches 2..N only. The third row "
        f"sleeps {BATCH * seq_len / 1e3:.1f} ms per batch, a training step that consumes exactly "
        f"1M tokens/s while the loader works. {repeats} repeats interleaved; medians (min–max). "
        f"DataLoader start method: `{multiprocessing.get_start_method()}` (Linux default).",
        "",
        "| run | batches | first batch s | samples/s | real tokens/s | total tokens/s | "
        "stall fraction | stall after the first batch | prefetch depth | shard fetches | "
        "mean fetch ms |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, feeds in runs.items():
        snap = {k: med([f.snapshot[k] for f in feeds]) for k in feeds[0].snapshot}
        lines.append(
            f"| {name} | {feeds[0].samples // BATCH + 1:,} | "
            f"{spread([f.first_batch_s for f in feeds], '.2f')} | "
            f"{spread([f.samples / f.steady_s for f in feeds])} | "
            f"{spread([f.real_tokens / f.steady_s / 1e6 for f in feeds], '.2f')} M | "
            f"{spread([f.total_tokens / f.steady_s / 1e6 for f in feeds], '.2f')} M | "
            f"{snap['stall_fraction']:.2f} | {med([f.steady_stall for f in feeds]):.2f} | "
            f"{snap['prefetch_depth']:.2f} | "
            f"{snap['shard_fetches']:.0f} | {snap['shard_fetch_mean_s'] * 1e3:.0f} |"
        )
    got = med([f.real_tokens / f.steady_s for f in runs["workers=2"]])
    paced = runs["workers=2, trainer step = 1M tokens/s"]
    paced_rate = med([f.real_tokens / f.steady_s for f in paced])
    paced_stall = med([f.steady_stall for f in paced])
    paced_ms = med([f.steady_s / (f.samples / BATCH) for f in paced]) * 1e3
    lines += [
        "",
        f"Issue goal ≥ 1M tokens/s to one trainer, workers=2: **{got / 1e6:.2f} M real "
        f"tokens/s** ({met(got >= 1e6)}); a trainer whose step consumes exactly 1M tokens/s "
        f"received {paced_rate / 1e6:.2f} M/s, waiting {paced_stall:.0%} of the time after its "
        f"first batch ({paced_ms:.1f} ms per batch against the {BATCH * seq_len / 1e3:.1f} ms "
        "step: the rest is the loop's own time, `time.sleep` overshoot included). The "
        "snapshot's stall fraction counts the first batch's wait too. "
        "With a trainer that only takes batches the stall fraction is near 1 by construction: "
        "the loader is the bottleneck.",
        "",
        f"What moving batches out of 2 workers costs on its own (each batch a fresh copy of "
        f"one real batch of {BATCH} × 2048: the same 8 tensors and doc ids, no reading); "
        "samples/s, medians (min–max):",
        "",
        "| batches carried as | samples/s | total tokens/s |",
        "|---|--:|--:|",
    ]
    for name, rates in transfers.items():
        lines.append(f"| {name} | {spread(rates)} | {med(rates) * seq_len / 1e6:.2f} M |")
    lines += [
        "",
        "Fork works (the rows above use it). For spawn/forkserver the dataset must pickle: it "
        f"does, {pickled['bytes'] / 1e3:.0f} kB in {pickled['seconds'] * 1e3:.0f} ms (memory "
        "maps are dropped; a worker re-maps and re-checks its shards), and the copy serves the "
        f"same first sample ({pickled['same_first']}). A spawned worker would also pay "
        "`import streaming` (10–25 s here) before its first batch, and `make_loader` takes no "
        "`multiprocessing_context`, so spawn would need the global start method.",
        "",
    ]
    return lines


def shm_section(parent: dict[str, Any], shm: dict[str, dict[str, Any]]) -> list[str]:
    lines = [
        "## 4. Shared memory in /dev/shm (and lock files in /tmp)",
        "",
        "Each loader in a child process of its own (`bench_loader.py --shm-child WHICH HOW`). "
        "Ours reads 2,000 samples one by one and 2,000 through `make_loader(num_workers=2)`; "
        "upstream reads 2,000 samples of `StreamingDataset(shuffle=True)`. The child then drops "
        "the loader (`del` + `gc.collect()`; upstream has no public close) and either exits "
        "normally or is SIGKILLed by the parent (a crash, an OOM kill, a preemption). Entries "
        "are new names against the listing taken before the child started (the machine is "
        "shared: other jobs' entries come and go); streaming's own are `NNNNNN_<block>` in "
        "/dev/shm and `NNNNNN_{barrier,cache}_filelock` in /tmp. "
        "`streaming.base.util.clean_stale_shared_memory()` runs after each child.",
        "",
        "| loader | child | new while reading | still there after del + gc | left after the "
        "process ended (streaming / other) | left after clean_stale_shared_memory() | "
        "lock files left in /tmp |",
        "|---|---|--:|--:|--:|--:|--:|",
    ]
    for key, s in shm.items():
        which, how = key.split("|")
        ending = "exits normally" if how == "exit" else "SIGKILLed"
        lines.append(
            f"| {which} | {ending} | {len(s['while_alive'])} | {len(s['after_del'])} | "
            f"{len(s['left_streaming'])} / {len(s['left_other'])} | "
            f"{len(s['left_after_clean'])} | {len(s['filelocks'])} |"
        )
    seen = sorted({e for s in shm.values() for e in s["while_alive"]})
    lines += [
        "",
        f"Created while reading: {', '.join(f'`{e}`' for e in seen) or 'none'}.",
        "",
        f"In this benchmark's own long-lived process, sections 1-3 made and closed "
        f"{parent['datasets']} StreamingDatasets (each: `_iterator.exit()`, executor shutdown, "
        f"`del`, `gc.collect()`, `clean_stale_shared_memory()`). Before section 4, "
        f"**{len(parent['left'])}** streaming blocks were still in /dev/shm, "
        f"{len(parent['left_after_clean'])} after one more `clean_stale_shared_memory()`, and "
        f"{len(parent['filelocks'])} lock files in /tmp. Every StreamingDataset leaves its two "
        "lock files in /tmp for good; a later dataset skips any prefix whose lock file "
        "exists, while `clean_stale_shared_memory()` walks prefixes from 0 and stops at the "
        "first one without shared memory, so it never reaches the blocks of those later "
        "datasets. They go only when the process exits. Ours creates no shared memory or lock "
        "files at all (torch's default file-descriptor sharing unlinks each worker-to-trainer "
        "block as soon as it is made). This script deletes the streaming lock files it created "
        "before it ends.",
        "",
    ]
    return lines


def cumulative_of(rows: ProfileRows, name: str) -> float:
    """Cumulative seconds of the profiled function whose label ends with `name`."""
    return sum(cum for where, _, _, cum in rows if where.endswith(name))


def profile_section(
    profiles: dict[str, tuple[int, float, ProfileRows]],
    diag: tuple[dict[str, list[float]], dict[str, list[float]]],
    transfers: dict[str, list[float]],
    feeds: dict[str, list[Feed]],
) -> list[str]:
    (_, total1, rows1), (_, total_w1, rows_w1), _ = profiles.values()
    rates, compares = diag
    rate = {k: med(v) for k, v in rates.items()}
    default = torch.get_num_threads()

    def block_rate(block: int, threads: int) -> float:
        return next(
            r for k, r in rate.items() if f"blocks of {block}" in k and k.endswith(f" {threads}")
        )

    def compare_us(elements: int, threads: int, q: float = 0.5) -> float:
        values = sorted(compares[f"{elements:,} elements, torch threads {threads}"])
        return values[min(len(values) - 1, int(q * len(values)))] * 1e6

    stream_rate = next(r for k, r in rate.items() if "batch_stream" in k)
    loader_rate = next(
        r for k, r in rate.items() if "make_loader" in k and k.endswith(f" {default}")
    )
    loader_rate1 = next(r for k, r in rate.items() if "make_loader" in k and k.endswith(" 1"))
    best_block = max(BLOCK_SIZES, key=lambda b: block_rate(b, 1))
    tensor_rate, numpy_rate = (med(v) for v in transfers.values())
    workers2 = med([f.samples / f.steady_s for f in feeds["workers=2"]])
    workers0 = med([f.samples / f.steady_s for f in feeds["workers=0"]])
    fetch_ms = med([f.snapshot["shard_fetch_mean_s"] for f in feeds["workers=0"]]) * 1e3
    init = cumulative_of(rows1, "blocks.py:39(__init__)") / total1
    read_raw = cumulative_of(rows1, "(read_raw)") / total1
    sample = cumulative_of(rows1, "(sample)") / total1
    sample_ids = cumulative_of(rows_w1, "(sample_ids)") / total_w1
    permutation = cumulative_of(rows_w1, "(permutation)") / total_w1
    block_elements = 128 * THROUGHPUT.seq_len
    lines = [
        "## Where the time goes",
        "",
        "Measured side by side in this run (samples/s of seq_len 2048, medians (min–max), "
        f"{len(next(iter(rates.values())))} repeats interleaved, shard checks taken out as in "
        f"section 1; torch's default here is {default} intra-op threads; the block size is "
        "fm_loader's private `_SAMPLES_PER_BLOCK`, set for this diagnostic only):",
        "",
        "| path | samples/s |",
        "|---|--:|",
    ]
    lines += [f"| {name} | {spread(values)} |" for name, values in rates.items()]
    lines += [
        "",
        "`tensor != -100` on int64 tensors (the op that makes `loss_mask`), calls 2 ms apart "
        "as between blocks, all repeats pooled, µs:",
        "",
        "| tensor | median | 90th percentile | max |",
        "|---|--:|--:|--:|",
    ]
    for name, values in compares.items():
        ordered = sorted(values)
        lines.append(
            f"| {name} | {med(values) * 1e6:,.0f} | "
            f"{ordered[int(0.9 * len(ordered))] * 1e6:,.0f} | {ordered[-1] * 1e6:,.0f} |"
        )
    lines += [
        "",
        f"1. **Per-sample path and torch's intra-op threads.** The block build is numpy only "
        "(torch splits element-wise ops over its intra-op threads above 32,768 elements, which "
        f"the comparison table above shows costing {compare_us(block_elements, default, 0.9):,.0f}"
        f" µs at the 90th percentile with {default} threads against "
        f"{compare_us(block_elements, 1, 0.9):,.0f} µs with 1 on this shared machine). "
        f"Per-sample rate with 128-sample blocks: {block_rate(128, default):,.0f} samples/s with "
        f"{default} torch threads, {block_rate(128, 1):,.0f} with 1; best block size with one "
        f"thread {best_block} ({block_rate(best_block, 1):,.0f} samples/s).",
        f"2. In the profile below (default threads), `Block.__init__` is {init:.0%} of the "
        f"per-sample path (cumulative), `ShardSet.read_raw` {read_raw:.0%} (per sample: a view "
        f"of the tokens, the doc ids and the spans read in place) and `Block.sample` "
        f"{sample:.0%}.",
        f"3. **Batch path:** `batch_stream` bare gives {stream_rate:,.0f} samples/s, "
        f"`make_loader(num_workers=0)` {loader_rate:,.0f} ({loader_rate1:,.0f} with one torch "
        "thread): without workers the loader's prefetch thread builds batches itself, so the "
        "difference is the thread hand-off.",
        f"4. **num_workers=2:** {workers2:,.0f} samples/s against {workers0:,.0f} with none. "
        f"Moving copies of one prebuilt batch out of 2 workers, no reading: {tensor_rate:,.0f} "
        "samples/s as torch tensors (one shared-memory block per tensor, passed by file "
        f"descriptor) against {numpy_rate:,.0f} as numpy arrays pickled through the pipe "
        f"({numpy_rate / tensor_rate:.1f}×); `make_loader` sends numpy and makes the tensors "
        "in the trainer process.",
        f"5. **Small shuffle windows:** with `shuffle_window=1`, `SourceOrder.sample_ids` is "
        f"{sample_ids:.0%} of the time and `permutation` {permutation:.0%} (positions are "
        "grouped by window once per chunk; one-sample windows draw no permutation).",
        "6. **Resume** meets its requirement. What remains is the sha256 of each shard on its "
        f"first use in a process (mean {fetch_ms:.0f} ms per 64 MB shard in section 3) and, "
        "for mixtures, `state_dict` walking the quota schedule position by position in Python "
        "(section 2).",
        "",
        "cProfile of our paths on the same set, shards already mapped and checked (a first "
        "untimed pass), so this is the steady state. The profiler adds its own overhead to every"
        " Python call: read the shares, not the µs. Top entries by own time.",
        "",
    ]
    for name, (n, total, rows) in profiles.items():
        lines += [
            f"**{name}**: {n:,} samples, {total:.2f} s profiled, {total / n * 1e6:.0f} µs per "
            "sample",
            "",
            "| function | calls | own s | share | cumulative s |",
            "|---|--:|--:|--:|--:|",
        ]
        for where, calls, own, cumulative in rows[:12]:
            lines.append(
                f"| `{where}` | {calls:,} | {own:.3f} | {own / total:.1%} | {cumulative:.3f} |"
            )
        lines.append("")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples and repeats")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--shm-child", nargs=2, metavar=("WHICH", "HOW"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.shm_child:
        shm_child(*args.shm_child)
        return
    plan = QUICK if args.quick else FULL
    started = time.perf_counter()
    when = dt.datetime.now(dt.UTC)
    load_start = os.getloadavg()[0]
    locks_at_start = streaming_filelocks()
    built = ensure_sets([THROUGHPUT, RESUME_A, RESUME_B])
    flat = write_flat_tokens(THROUGHPUT)
    quiet_upstream()
    import streaming  # noqa: F401  (10-25 s: paid here, outside every timed region)

    for spec in (THROUGHPUT, RESUME_A, RESUME_B):
        page_in([spec.directory / s.name for s in read_manifest(spec.directory).shards])
    page_in([flat])

    print("1. throughput", flush=True)
    reads = throughput(plan, flat)
    print("2. resume", flush=True)
    res = resume(plan)
    print("3. trainer feed", flush=True)
    runs, transfers = feed(plan)
    pickled = pickle_check()
    print("4. /dev/shm", flush=True)
    parent_shm = shm_in_this_process(locks_at_start)
    shm = shm_side_by_side()
    print("diagnostics and profiles", flush=True)
    diag = diagnostics(plan)
    n = plan.profile_samples
    profiles = {
        "per-sample path, `for s in ds` (shuffle_window 65536)": (
            n,
            *profile_ours(n, 1 << 16, batches=False),
        ),
        "per-sample path, shuffle_window=1": (n // 4, *profile_ours(n // 4, 1, batches=False)),
        f"`ds.batch_stream()`, batch_size {BATCH} (what each DataLoader worker runs)": (
            n,
            *profile_ours(n, 1 << 16, batches=True),
        ),
    }

    command = ".venv/bin/python bench/bench_loader.py" + (" --quick" if args.quick else "")
    lines = [
        "# fm_loader vs upstream StreamingDataset vs a raw memmap read",
        "",
        f"Written by `{command}` on {when:%Y-%m-%d %H:%M} UTC; the whole run took "
        f"{time.perf_counter() - started:.0f} s. {machine_line()}. Load average (1 min) "
        f"{load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, on 2 cores: the "
        "machine is shared and noisy, so read the ratios measured side by side, not the "
        "absolute rates.",
        "",
        "## Data",
        "",
        "Real tokens: the visible text of the 53 HTML pages of the four shared WARCs "
        "(`cc-main-2020-34-sample`, `wget-sample-0000/0001`, `cc-main-2024-22-whirlwind`) "
        "tokenized with GPT-NeoX-20B: 106,747 tokens, median page ~1,000 tokens. That is far too "
        "little for stable timing, so **every set repeats those real pages under distinct doc "
        "ids** (sha256 of `<page id>:<copy>`; set B uses copies set A does not) until it has "
        "its samples, packed best-fit-decreasing (`fm_assets.shards.packing.pack_documents`) and "
        "written by `fm_assets.shards.writer.write_shard_set`: uncompressed MDS, 64 MB shards, "
        "uint16 tokens, the loader's three columns. Cached under /tmp/fm_bench_loader/, rebuilt "
        "when missing.",
        "",
        "| set | seq_len | samples | real tokens | packing eff. | shards | shard bytes | "
        "distinct doc ids | |",
        "|---|--:|--:|--:|--:|--:|--:|--:|---|",
        set_row(THROUGHPUT, built),
        set_row(RESUME_A, built),
        set_row(RESUME_B, built),
        "",
        f"The flat-file limit reads `{flat.name}` ({flat.stat().st_size / 1e6:,.0f} MB): the "
        "first set's input_ids, written once with `ndarray.tofile` in sample order.",
        "",
    ]
    lines += throughput_section(reads, plan)
    lines += resume_section(res, plan)
    lines += feed_section(runs, transfers, pickled)
    lines += shm_section(parent_shm, shm)
    lines += profile_section(profiles, diag, transfers, runs)
    lines += [
        "## Rerun",
        "",
        "```",
        ".venv/bin/python bench/bench_loader.py           # this report (~5-7 min; +3 min to "
        "build the sets the first time)",
        ".venv/bin/python bench/bench_loader.py --quick   # fewer samples and repeats",
        "rm -rf /tmp/fm_bench_loader                      # rebuild the shard sets",
        "```",
        "",
    ]
    for name in streaming_filelocks() - locks_at_start:  # what upstream left in /tmp
        Path(tempfile.gettempdir(), name).unlink(missing_ok=True)
    text = "\n".join(lines)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
