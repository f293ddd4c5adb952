"""Faults of the environment, injected on the wire: a real S3 server (SeaweedFS, loopback)
behind a proxy that cuts answers with a reset, answers reads itself (a 500, a 503, a throttling
SlowDown, a 404 for a landed object, or nothing until the client's read timeout), refuses
everything for a while, or holds every answer; the raw stage reads landed files through it and
the loader downloads shard sets."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench.harness import WARC_DIR, log
from fm_assets.commands import operations
from fm_assets.execution.runner import run_stage
from fm_assets.settings import Settings, load_settings
from fm_assets.storage import catalog
from fm_loader import make_dataset, make_loader
from fm_loader.storage.retry import StorageUnavailable
from tests.services import flaky_proxy as proxy_faults
from tests.services.flaky_proxy import Fault, FlakyProxy, flaky_proxy
from tests.services.s3 import S3Server, seaweedfs_s3
from tests.shard_sets import Built, build, synthetic_docs

CRAWLS = [WARC_DIR / "wget-sample-0000.warc.gz", WARC_DIR / "wget-sample-0001.warc.gz"]
RESETS_PER_RUN = 8
# GETs of the landed crawl answered by the proxy per run: more than the S3 client's own attempts
# (3), fewer than the platform's (`with_retries`: 6), so the platform's retries carry the stage.
ANSWERED_PER_RUN = 5
ANSWERED = [
    (proxy_faults.HANG, "read hangs past the client's read timeout"),
    (proxy_faults.HTTP_500, "HTTP 500 InternalError"),
    (proxy_faults.HTTP_503, "HTTP 503 ServiceUnavailable"),
    (proxy_faults.SLOW_DOWN, "throttling: HTTP 503 SlowDown"),
    (proxy_faults.NO_SUCH_KEY, "404 NoSuchKey for a landed object"),
]


@dataclass
class Kind:
    """One kind of fault: how many were injected and what they cost."""

    name: str
    what: str
    injected: int = 0
    runs: int = 0
    records: int = 0  # records (or samples) the faulted runs had to deliver
    lost: int = 0
    wrongly_quarantined: int = 0  # quarantine rows a fault caused (goal 0)


Outcome = tuple[set[tuple[object, ...]], set[tuple[object, ...]]]


def _outcome(settings: Settings, batch_id: str) -> Outcome:
    kept = catalog.read_batch(settings, "raw_documents", batch_id, columns=("record_id",))
    bad = catalog.read_batch(settings, "quarantine", batch_id, columns=("record_id", "rule"))
    return (
        {tuple(r.values()) for r in kept.to_pylist()},
        {tuple(r.values()) for r in bad.to_pylist()},
    )


def _count(kind: Kind, got: Outcome, clean: Outcome) -> None:
    kind.runs += 1
    kind.records += len(clean[0]) + len(clean[1])
    kind.lost += len(clean[0] - got[0]) + len(clean[1] - got[1])
    kind.wrongly_quarantined += len(got[1] - clean[1])


def _crawl(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    crawl = directory / "crawl.warc.gz"
    crawl.write_bytes(b"".join(p.read_bytes() for p in CRAWLS))
    return crawl


def _settings(home: Path, s3: S3Server | None, proxy: FlakyProxy | None) -> Settings:
    env = {
        "FM_HOME": str(home),
        "FM_PART_BYTES": str(256 << 10),  # several byte-range parts per landed file
        "RAY_ADDRESS": os.environ["RAY_ADDRESS"],
    }
    if s3 is not None and proxy is not None:
        env |= {
            "FM_OBJECT_STORE": f"s3://{s3.bucket}/{home.name}-{uuid.uuid4().hex[:8]}",
            "FM_S3_ENDPOINT": proxy.endpoint,
            **s3.env(),
        }
    return load_settings(env)


def _landed(settings: Settings, crawl: Path) -> str:
    return operations.land(settings, [crawl], source="crawl", license="CC0-1.0")[0].batch_id


def measure(workdir: Path, rounds: int) -> list[Kind]:
    """Every kind of fault `rounds` times; the environment's S3 credentials must reach Ray."""
    crawl = _crawl(workdir / "in")
    clean_settings = _settings(workdir / "clean", None, None)
    clean_batch = _landed(clean_settings, crawl)
    run_stage(clean_settings, "raw_documents", clean_batch)
    clean = _outcome(clean_settings, clean_batch)
    resets = Kind("connection reset mid-answer", "landed-file reads of the raw stage")
    answered = [
        (fault, Kind(name, f"first {ANSWERED_PER_RUN} GETs of the landed file, raw stage"))
        for fault, name in ANSWERED
    ]
    down = Kind("store down (every request reset)", "the raw stage fails; rerun once healed")
    cut = Kind("connection reset mid-download", "loader downloading a shard set")
    held = Kind("store stops answering (stall)", "loader re-fetching a damaged cached shard")
    with seaweedfs_s3(workdir / "seaweedfs", bucket="fm-bench") as s3:
        for name, value in s3.env().items():
            os.environ[name] = value
        port = int(s3.endpoint.rsplit(":", 1)[1])
        with flaky_proxy(port) as proxy:
            local = build(workdir / "set", synthetic_docs(300), 64, size_limit_bytes=4 << 10)
            uri = _upload(s3, local)
            for round_ in range(rounds):
                log(f"faults: round {round_ + 1}/{rounds}")
                _resets(workdir / f"resets-{round_}", s3, proxy, crawl, clean, resets)
                for fault, kind in answered:
                    home = workdir / f"{fault.name.lower()}-{round_}"
                    _answered(home, s3, proxy, crawl, clean, fault, kind)
                _down(workdir / f"down-{round_}", s3, proxy, crawl, clean, down)
                _download(workdir / f"cut-{round_}", proxy, uri, local, cut)
                _stall(workdir / f"held-{round_}", proxy, uri, local, held)
    return [resets, *(kind for _, kind in answered), down, cut, held]


def _resets(
    home: Path, s3: S3Server, proxy: FlakyProxy, crawl: Path, clean: Outcome, kind: Kind
) -> None:
    settings = _settings(home, s3, proxy)
    batch = _landed(settings, crawl)
    before = proxy.injected
    proxy.fail_next(RESETS_PER_RUN)
    run_stage(settings, "raw_documents", batch)
    proxy.heal()
    kind.injected += proxy.injected - before
    _count(kind, _outcome(settings, batch), clean)


def _answered(
    home: Path,
    s3: S3Server,
    proxy: FlakyProxy,
    crawl: Path,
    clean: Outcome,
    fault: Fault,
    kind: Kind,
) -> None:
    settings = _settings(home, s3, proxy)
    batch = _landed(settings, crawl)
    proxy.answer_next(fault, ANSWERED_PER_RUN, key=crawl.name, methods=("GET",))
    try:
        run_stage(settings, "raw_documents", batch)
    finally:
        kind.injected += ANSWERED_PER_RUN - proxy.unanswered()
        proxy.heal()
    _count(kind, _outcome(settings, batch), clean)


def _down(
    home: Path, s3: S3Server, proxy: FlakyProxy, crawl: Path, clean: Outcome, kind: Kind
) -> None:
    settings = _settings(home, s3, proxy)
    batch = _landed(settings, crawl)
    proxy.fail_all()
    try:
        run_stage(settings, "raw_documents", batch)
        raise RuntimeError("the raw stage succeeded against a store that refused everything")
    except StorageUnavailable:
        kind.injected += 1
    finally:
        proxy.heal()
    if _outcome(settings, batch) != (set(), set()):
        raise RuntimeError("a failed raw stage committed rows")
    run_stage(settings, "raw_documents", batch)
    _count(kind, _outcome(settings, batch), clean)


def _upload(s3: S3Server, local: Built) -> str:
    prefix = f"{s3.bucket}/faults/set"
    fs = s3.filesystem()
    for path in sorted(local.directory.iterdir()):
        with fs.open_output_stream(f"{prefix}/{path.name}", compression=None) as out:
            out.write(path.read_bytes())
    return f"s3://{prefix}"


def _served(local: Built, samples: list[list[int]], kind: Kind) -> None:
    expected = Counter(tuple(local.expected_ids(i).tolist()) for i in range(local.num_samples))
    kind.runs += 1
    kind.records += local.num_samples
    kind.lost += sum((expected - Counter(tuple(ids) for ids in samples)).values())


def _download(home: Path, proxy: FlakyProxy, uri: str, local: Built, kind: Kind) -> None:
    before = proxy.injected
    proxy.fail_next(6)
    settings = load_settings({"FM_HOME": str(home), "FM_S3_ENDPOINT": proxy.endpoint})
    dataset = make_dataset(uri, settings=settings, cache_dir=home / "cache")
    proxy.heal()
    kind.injected += proxy.injected - before
    _served(
        local,
        [ids for b in make_loader(dataset, batch_size=4) for ids in b["input_ids"].tolist()],
        kind,
    )


def _stall(home: Path, proxy: FlakyProxy, uri: str, local: Built, kind: Kind) -> None:
    settings = load_settings({"FM_HOME": str(home), "FM_S3_ENDPOINT": proxy.endpoint})
    cache = home / "cache"
    make_dataset(uri, settings=settings, cache_dir=cache)
    (entry,) = [p for p in cache.iterdir() if not p.name.startswith(".")]
    shard = entry / local.manifest.shards[len(local.manifest.shards) // 2].name
    damaged = bytearray(shard.read_bytes())
    damaged[len(damaged) // 2] ^= 0x01
    shard.write_bytes(bytes(damaged))
    loader = make_loader(make_dataset(uri, settings=settings, cache_dir=cache), batch_size=4)
    samples: list[list[int]] = []

    def train() -> None:
        for batch in loader:
            samples.extend(batch["input_ids"].tolist())
            time.sleep(0.05)

    proxy.stall()
    trainer = threading.Thread(target=train, daemon=True)
    trainer.start()
    if proxy.stalled.wait(timeout=120):
        kind.injected += 1
        time.sleep(2.0)
    proxy.resume()
    trainer.join(timeout=300)
    _served(local, samples, kind)


def section(kinds: list[Kind]) -> str:
    lines = [
        "## 2. Faults of the environment",
        "",
        "A real S3 server (SeaweedFS on loopback) behind a TCP proxy that injects the fault; "
        "the raw stage reads the two shared wget crawls (one multi-member file, 256 KB parts) "
        "from it, the loader a 300-document synthetic shard set. Answered faults: the proxy "
        f"answers the first {ANSWERED_PER_RUN} GETs of the landed file itself, more than the "
        "S3 client's own 3 attempts, so the platform's retries carry the stage. Records are "
        "compared with a clean run on a local store (every kept record and every quarantine "
        "row).",
        "",
        "| fault | where | injected | runs | records to deliver | lost (goal 0) | "
        "quarantined by the fault (goal 0) |",
        "|---|---|---|---|---|---|---|",
    ]
    for k in kinds:
        lines.append(
            f"| {k.name} | {k.what} | {k.injected} | {k.runs} | {k.records} | {k.lost} | "
            f"{k.wrongly_quarantined} |"
        )
    return "\n".join(lines)
