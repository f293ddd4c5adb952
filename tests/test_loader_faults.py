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
from fm_loader import make_dataset, make_loader, retry
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
