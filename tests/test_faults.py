"""Faults of the environment lose nothing: a real S3 server behind a proxy that injects them.

The landing zone is on SeaweedFS (loopback); every read of a landed file goes through a TCP proxy
that can cut answers halfway and reset the connection, answer a read with a 500, a 503 or a
throttling SlowDown, say a landed object does not exist (404 NoSuchKey), or never answer (the
client's read timeout), as a flaky network, an overloaded store or a lagging replica does. A read
that fails that way is retried and never becomes a quarantine row; when the store stays down the
stage fails, commits nothing, and the rerun reads every record.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fm_assets.commands import operations
from fm_assets.execution.runner import run_stage
from fm_assets.settings import Settings, load_settings
from fm_assets.storage import bookkeeping, catalog
from fm_loader.storage.retry import StorageUnavailable
from tests.conftest import WARC_DIR, ray_workers_with
from tests.services import flaky_proxy as faults
from tests.services.flaky_proxy import FlakyProxy, flaky_proxy
from tests.services.s3 import S3Server

pytestmark = pytest.mark.slow

# Two real crawls in one multi-member file, read in several byte-range parts.
WARCS = [WARC_DIR / "wget-sample-0000.warc.gz", WARC_DIR / "wget-sample-0001.warc.gz"]
PART_BYTES = 256 << 10
# Reads of the landed crawl answered with the fault: more than the S3 client's own attempts (the
# AWS SDK tries a request 3 times), fewer than `with_retries`' 6, so the platform's retries are
# what carries the stage through.
FAULTED_READS = 5


@dataclass(frozen=True)
class RawOutcome:
    kept: list[tuple[object, ...]]  # (doc_id, record_id), sorted
    quarantined: list[tuple[object, ...]]  # (record_id, rule), sorted


def _crawl(directory: Path) -> Path:
    crawl = directory / "crawl.warc.gz"
    if not crawl.exists():
        directory.mkdir(parents=True, exist_ok=True)
        crawl.write_bytes(b"".join(w.read_bytes() for w in WARCS))
    return crawl


def _outcome(settings: Settings, batch_id: str) -> RawOutcome:
    kept = catalog.read_batch(settings, "raw_documents", batch_id, columns=("doc_id", "record_id"))
    bad = catalog.read_batch(settings, "quarantine", batch_id, columns=("record_id", "rule"))
    return RawOutcome(
        kept=sorted(tuple(r.values()) for r in kept.to_pylist()),
        quarantined=sorted(tuple(r.values()) for r in bad.to_pylist()),
    )


@pytest.fixture(scope="module")
def clean_outcome(ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> RawOutcome:
    """The raw stage's result on a local object store, with no fault anywhere."""
    home = tmp_path_factory.mktemp("clean")
    settings = load_settings(_env({"FM_HOME": str(home / "fm")}))
    batch, _ = operations.land(settings, [_crawl(home)], source="crawl", license="CC0-1.0")
    run_stage(settings, "raw_documents", batch.batch_id)
    outcome = _outcome(settings, batch.batch_id)
    assert len(outcome.kept) > 20
    return outcome


def _env(extra: dict[str, str]) -> dict[str, str]:
    import os

    env = {"FM_PART_BYTES": str(PART_BYTES), **extra}
    if os.environ.get("RAY_ADDRESS"):
        env["RAY_ADDRESS"] = os.environ["RAY_ADDRESS"]
    return env


@dataclass(frozen=True)
class FlakyLanding:
    settings: Settings
    proxy: FlakyProxy
    batch_id: str


@pytest.fixture
def flaky_landing(
    s3_session: S3Server,
    ray_session: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[FlakyLanding]:
    """A batch landed on S3 through the proxy (no faults yet); the warehouse is local."""
    port = int(s3_session.endpoint.rsplit(":", 1)[1])
    with flaky_proxy(port) as proxy:
        for name, value in s3_session.env().items():
            monkeypatch.setenv(name, value)
        ray_workers_with(s3_session.env())
        env = _env(
            {
                "FM_HOME": str(tmp_path / "fm"),
                "FM_OBJECT_STORE": f"s3://{s3_session.bucket}/faults-{uuid.uuid4().hex[:8]}",
                "FM_S3_ENDPOINT": proxy.endpoint,
                **s3_session.env(),
            }
        )
        settings = load_settings(env)
        batch, _ = operations.land(
            settings, [_crawl(tmp_path / "in")], source="crawl", license="CC0-1.0"
        )
        yield FlakyLanding(settings, proxy, batch.batch_id)


def test_connections_reset_while_reading_landed_files_lose_no_record(
    flaky_landing: FlakyLanding, clean_outcome: RawOutcome
) -> None:
    flaky_landing.proxy.fail_next(8)
    run_stage(flaky_landing.settings, "raw_documents", flaky_landing.batch_id)

    assert flaky_landing.proxy.injected >= 4, "reads were not cut short: no fault was tested"
    outcome = _outcome(flaky_landing.settings, flaky_landing.batch_id)
    # Record ids name the landed file's hash, which is the same on both stores.
    assert outcome == clean_outcome


def test_a_store_that_stays_down_fails_the_stage_and_the_rerun_reads_everything(
    flaky_landing: FlakyLanding, clean_outcome: RawOutcome
) -> None:
    settings, batch_id = flaky_landing.settings, flaky_landing.batch_id
    flaky_landing.proxy.fail_all()
    with pytest.raises(StorageUnavailable, match=r"reading s3://.*failed \d+ times.*rerun"):
        run_stage(settings, "raw_documents", batch_id)

    # Nothing was committed: no rows, no quarantine rows, no stage run that would skip a rerun.
    assert bookkeeping.latest_stage_run(settings, batch_id, "raw_documents") is None
    assert _outcome(settings, batch_id) == RawOutcome(kept=[], quarantined=[])

    flaky_landing.proxy.heal()
    run_stage(settings, "raw_documents", batch_id)
    assert _outcome(settings, batch_id) == clean_outcome


@pytest.mark.parametrize(
    "fault",
    [faults.HANG, faults.HTTP_500, faults.HTTP_503, faults.SLOW_DOWN, faults.NO_SUCH_KEY],
    ids=lambda fault: fault.name,
)
def test_reads_of_landed_files_answered_with_errors_or_never_lose_no_record(
    fault: faults.Fault, flaky_landing: FlakyLanding, clean_outcome: RawOutcome
) -> None:
    """The first reads (GETs) of the landed crawl time out, fail with a 5xx or throttling
    answer, or find no such key although the manifest lists it: every record still arrives
    and the fault causes no quarantine row."""
    proxy = flaky_landing.proxy
    proxy.answer_next(fault, FAULTED_READS, key="crawl.warc.gz", methods=("GET",))
    run_stage(flaky_landing.settings, "raw_documents", flaky_landing.batch_id)

    assert proxy.unanswered() == 0, "the landed file was read fewer times than faults planned"
    if fault is faults.HANG:
        # Each hung read was given up by the client (its read timeout), not closed by the proxy.
        assert proxy.hangs_given_up == FAULTED_READS
    # Every kept record and every quarantine row equal the clean run's: none lost, none added.
    assert _outcome(flaky_landing.settings, flaky_landing.batch_id) == clean_outcome
