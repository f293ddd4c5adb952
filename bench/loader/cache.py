"""6. The node cache against a real S3 server (SeaweedFS on loopback, as the tests run it): the
first epoch cold (downloading as it opens) against warm (pre-warmed), and pre-warm MB/s against
a raw copy of the same files with pyarrow's own S3 client."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from bench.harness import interleave, median, median_and_range
from bench.loader.plan import Plan
from bench.loader.readers import BATCH, SEED
from bench.loader.sets import THROUGHPUT
from fm_loader import make_dataset, make_loader, prewarm, read_manifest
from fm_loader.settings import load_loader_settings
from tests.services.s3 import S3Server, seaweedfs_s3


@dataclass(frozen=True)
class Epoch:
    seconds: float  # make_dataset (with any download) to the epoch's last batch
    open_s: float  # make_dataset alone
    samples: int
    hit_rate: float


@dataclass(frozen=True)
class Copy:
    seconds: float
    bytes: int


@contextmanager
def s3_store() -> Iterator[tuple[S3Server, str]]:
    """A SeaweedFS S3 server holding the throughput set; the loader reaches it by env vars."""
    with (
        tempfile.TemporaryDirectory(prefix="fm-bench-s3-") as tmp,
        seaweedfs_s3(Path(tmp) / "weed", bucket="bench") as server,
    ):
        saved = {k: os.environ.get(k) for k in (*server.env(), "FM_S3_ENDPOINT")}
        os.environ.update({**server.env(), "FM_S3_ENDPOINT": server.endpoint})
        try:
            fs = server.filesystem()
            prefix = f"{server.bucket}/sets/{THROUGHPUT.directory.name}"
            for path in sorted(THROUGHPUT.directory.iterdir()):
                if path.suffix == ".u16":  # the flat-file limit of section 1, not the set
                    continue
                with (
                    open(path, "rb") as src,
                    fs.open_output_stream(f"{prefix}/{path.name}", compression=None) as out,
                ):
                    shutil.copyfileobj(src, out, 8 << 20)
            yield server, f"s3://{prefix}"
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def first_epoch(uri: str, cache: Path, warm: bool) -> Epoch:
    """One whole epoch through make_loader(num_workers=2), cold or after a pre-warm."""
    shutil.rmtree(cache, ignore_errors=True)
    settings = load_loader_settings()
    if warm:
        prewarm(uri, cache_dir=cache, settings=settings)  # not timed: done before the run
    started = time.perf_counter()
    dataset = make_dataset(uri, rank=0, world_size=1, seed=SEED, cache_dir=cache, settings=settings)
    opened = time.perf_counter() - started
    loader = make_loader(dataset, batch_size=BATCH, num_workers=2)
    samples = sum(len(b["sample_index"]) for b in loader)
    seconds = time.perf_counter() - started
    hit_rate = loader.metrics.snapshot()["cache_hit_rate"]
    dataset.close()
    return Epoch(seconds, opened, samples, hit_rate)


def timed_prewarm(uri: str, cache: Path) -> Copy:
    shutil.rmtree(cache, ignore_errors=True)
    started = time.perf_counter()
    (report,) = prewarm(uri, cache_dir=cache, settings=load_loader_settings())
    return Copy(time.perf_counter() - started, report.bytes_total)


def raw_copy(server: S3Server, uri: str, out: Path) -> Copy:
    """pyarrow's `copy_files` of the set's shards (threads on): the library's fast path, with
    neither hashing nor fsync."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    started = time.perf_counter()
    pafs.copy_files(
        uri.removeprefix("s3://"),
        str(out),
        source_filesystem=server.filesystem(),
        destination_filesystem=pafs.LocalFileSystem(),
        use_threads=True,
    )
    seconds = time.perf_counter() - started
    manifest = read_manifest(THROUGHPUT.directory)
    shards = sum((out / s.name).stat().st_size for s in manifest.shards)
    return Copy(seconds, shards)


def measure(plan: Plan) -> tuple[dict[str, list[Epoch]], dict[str, list[Copy]]]:
    with s3_store() as (server, uri), tempfile.TemporaryDirectory(prefix="fm-bench-c-") as tmp:
        cache, copy = Path(tmp) / "cache", Path(tmp) / "copy"
        epochs: dict[str, Callable[[], Epoch]] = {
            "cold: make_dataset downloads and verifies, then the epoch": lambda: first_epoch(
                uri, cache, False
            ),
            "warm: pre-warmed cache, then the epoch": lambda: first_epoch(uri, cache, True),
        }
        copies: dict[str, Callable[[], Copy]] = {
            "fm_loader.prewarm (download, sha256, fsync, rename)": lambda: timed_prewarm(
                uri, cache
            ),
            "raw copy: pyarrow.fs.copy_files, threads": lambda: raw_copy(server, uri, copy),
        }
        return interleave(epochs, plan.cache_repeats), interleave(copies, plan.cache_repeats)


def section(epochs: dict[str, list[Epoch]], copies: dict[str, list[Copy]]) -> list[str]:
    """Section 6 of the report."""
    manifest = read_manifest(THROUGHPUT.directory)
    size = sum(s.bytes for s in manifest.shards) / 1e6
    repeats = len(next(iter(epochs.values())))
    lines = [
        "## 6. The node cache: cold against warm first epoch, pre-warm against a raw copy",
        "",
        f"`{THROUGHPUT.directory.name}` ({size:,.0f} MB of shards) in a SeaweedFS S3 bucket on "
        "loopback (the server the tests run; no network in between, so these are the costs "
        "of the client and the disk, not of a link). Epoch: `make_dataset(s3 uri, cache_dir)` "
        f"then every batch of `make_loader(batch_size={BATCH}, num_workers=2)`; cold starts "
        "from an empty cache, warm from one `fm_loader.prewarm` filled before the clock. "
        f"{repeats} repeats interleaved; medians (min–max).",
        "",
        "| first epoch | seconds | of which make_dataset s | samples/s | cache hit rate |",
        "|---|--:|--:|--:|--:|",
    ]
    for name, runs in epochs.items():
        lines.append(
            f"| {name} | {median_and_range([r.seconds for r in runs])} | "
            f"{median_and_range([r.open_s for r in runs])} | "
            f"{median([r.samples / r.seconds for r in runs]):,.0f} | "
            f"{median([r.hit_rate for r in runs]):.0%} |"
        )
    cold_runs, warm_runs = epochs.values()
    cold = median([r.seconds for r in cold_runs])
    warm = median([r.seconds for r in warm_runs])
    lines += [
        "",
        f"A warm cache makes the first epoch {cold / warm:.2f}× as fast as a cold one here.",
        "",
        "| copy of the set's shards | seconds | MB/s |",
        "|---|--:|--:|",
    ]
    for name, runs in copies.items():
        lines.append(
            f"| {name} | {median_and_range([r.seconds for r in runs])} | "
            f"{median_and_range([r.bytes / r.seconds / 1e6 for r in runs], ',.0f')} |"
        )
    ours_runs, raw_runs = copies.values()
    ours = median([r.bytes / r.seconds for r in ours_runs])
    raw = median([r.bytes / r.seconds for r in raw_runs])
    lines += [
        "",
        f"Pre-warm at **{ours / raw:.2f}×** the raw copy's MB/s (ours also hashes every byte, "
        "fsyncs each file and renames it into place; the raw copy does neither).",
        "",
    ]
    return lines
