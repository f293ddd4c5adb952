"""The loader under a flaky object store: a real S3 server behind a proxy that resets answers.

Downloading a shard set whose reads are cut halfway still yields every sample exactly, the
retries show in the loader's metrics, and a store that stays down is named as unavailable.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fm_assets.settings import Settings, load_settings
from fm_loader import make_dataset, make_loader
from fm_loader.storage import retry
from fm_loader.storage.cache_usage import USAGE_NAME
from tests.services.flaky_proxy import FlakyProxy, flaky_proxy
from tests.services.s3 import S3Server
from tests.shard_sets import Built, build, synthetic_docs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def remote_set(
    s3_session: S3Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Built, str, FlakyProxy]]:
    local = build(
        tmp_path_factory.mktemp("faults") / "set", synthetic_docs(300), 64, size_limit_bytes=4 << 10
    )
    prefix = f"{s3_session.bucket}/loader-faults/set"
    fs = s3_session.filesystem()
    for path in sorted(local.directory.iterdir()):
        with fs.open_output_stream(f"{prefix}/{path.name}", compression=None) as out:
            out.write(path.read_bytes())
    port = int(s3_session.endpoint.rsplit(":", 1)[1])
    with pytest.MonkeyPatch.context() as env, flaky_proxy(port) as proxy:
        for name, value in s3_session.env().items():
            env.setenv(name, value)
        yield local, f"s3://{prefix}", proxy


def _settings(proxy: FlakyProxy, home: Path) -> Settings:
    return load_settings({"FM_HOME": str(home), "FM_S3_ENDPOINT": proxy.endpoint})


def test_a_download_cut_by_resets_still_serves_every_sample(
    remote_set: tuple[Built, str, FlakyProxy], tmp_path: Path
) -> None:
    local, uri, proxy = remote_set
    before = retry.retries_so_far()
    proxy.fail_next(6)
    dataset = make_dataset(uri, settings=_settings(proxy, tmp_path), cache_dir=tmp_path / "cache")
    loader = make_loader(dataset, batch_size=4)
    got = [ids for batch in loader for ids in batch["input_ids"].tolist()]

    assert proxy.injected >= 3, "no read was cut short: no fault was tested"
    assert len(got) == local.num_samples
    expected = sorted(local.expected_ids(i).tolist() for i in range(local.num_samples))
    assert sorted(got) == expected
    # Some cuts are retried inside the S3 client itself; the rest show as retries here.
    assert loader.metrics.snapshot()["storage_retries"] > before
    assert np.isfinite(loader.metrics.snapshot()["stall_fraction"])


def test_a_store_that_stays_down_is_named_unavailable(
    remote_set: tuple[Built, str, FlakyProxy], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, uri, proxy = remote_set
    monkeypatch.setattr(retry.time, "sleep", lambda seconds: None)
    proxy.fail_all()
    try:
        with pytest.raises(retry.StorageUnavailable, match=r"failed 6 times.*rerun"):
            make_dataset(uri, settings=_settings(proxy, tmp_path), cache_dir=tmp_path / "cache")
    finally:
        proxy.heal()
    assert not any((tmp_path / "cache").glob("*/fm_manifest.json")), "a partial set was cached"


PREFETCH, BATCH, STEP_S, HOLD_S = 4, 4, 0.1, 4.0


def _batch_of_first_use(local: Built, order: list[list[int]]) -> dict[int, int]:
    """For each shard, the first batch (of `order`, the batches' sample indices) that reads it."""
    bounds = np.cumsum([s.samples for s in local.manifest.shards])
    first: dict[int, int] = {}
    for number, batch in enumerate(order):
        for shard in np.searchsorted(bounds, batch, side="right").tolist():
            first.setdefault(int(shard), number)
    return first


def test_a_stalled_shard_fetch_is_covered_by_the_prefetched_batches_and_shows_as_stall(
    remote_set: tuple[Built, str, FlakyProxy], tmp_path: Path
) -> None:
    """A cached shard that fails its checksum is fetched again from the store, which stops
    answering for a while: the trainer keeps getting the batches already prefetched, then waits
    until the fetch completes; the wait shows in the stall metric and the fetch in its latency."""
    import threading
    import time

    local, uri, proxy = remote_set
    settings, cache = _settings(proxy, tmp_path), tmp_path / "cache"
    first_pass = make_loader(
        make_dataset(uri, settings=settings, cache_dir=cache), batch_size=BATCH
    )
    order = [batch["sample_index"].tolist() for batch in first_pass]
    first_use = _batch_of_first_use(local, order)
    # A shard first read well after the prefetch queue has filled, with batches after it.
    shard = min(s for s, b in first_use.items() if PREFETCH + 3 <= b < len(order) - 2)
    info = local.manifest.shards[shard]
    (entry,) = [p for p in cache.iterdir() if not p.name.startswith(".") and p.name != USAGE_NAME]
    good = (entry / info.name).read_bytes()
    damaged = bytearray(good)
    damaged[len(damaged) // 2] ^= 0x01
    (entry / info.name).write_bytes(bytes(damaged))

    loader = make_loader(
        make_dataset(uri, settings=settings, cache_dir=cache),
        batch_size=BATCH,
        prefetch_batches=PREFETCH,
    )
    received: list[list[int]] = []
    waits: list[float] = []
    tokens: list[list[int]] = []

    def train() -> None:
        batches = iter(loader)
        while True:
            started = time.perf_counter()
            batch = next(batches, None)
            waits.append(time.perf_counter() - started)
            if batch is None:
                return
            received.append(batch["sample_index"].tolist())
            tokens.extend(batch["input_ids"].tolist())
            time.sleep(STEP_S)  # the training step

    proxy.stall()
    trainer = threading.Thread(target=train, daemon=True)
    try:
        trainer.start()
        assert proxy.stalled.wait(timeout=120), "the damaged shard was never fetched again"
        served_before = len(received)
        time.sleep(HOLD_S)
        served_during = len(received) - served_before
    finally:
        proxy.resume()
    trainer.join(timeout=120)
    assert not trainer.is_alive(), "the trainer never got past the stalled fetch"

    # Nothing lost: every sample once, with its tokens; the shard in the cache is whole again.
    assert received == order
    assert sorted(tokens) == sorted(local.expected_ids(i).tolist() for i in range(len(tokens)))
    assert (entry / info.name).read_bytes() == good
    # While the fetch was held the trainer went on with what was prefetched, then waited.
    assert served_before < first_use[shard], "the fetch started before its shard was needed?"
    assert 1 <= served_during <= PREFETCH + 1, served_during
    stall = max(waits)
    assert stall >= 1.0, f"the trainer never waited for the held fetch: {waits}"
    metrics = loader.metrics.snapshot()
    assert loader.metrics.wait_s >= stall - 0.25, (loader.metrics.wait_s, stall)
    assert metrics["stall_fraction"] > 0
    assert metrics["shard_fetch_max_s"] >= HOLD_S, metrics
