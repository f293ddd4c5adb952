"""What is retried and what is not: transient failures of the environment versus bad data."""

from __future__ import annotations

import gzip
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from fm_assets.settings import Settings
from fm_assets.storage import catalog, data_files
from fm_loader.storage.retry import StorageUnavailable, is_transient, with_retries
from tests.rows import quarantine_rows


class Flaky:
    """An operation that fails with `error` for its first `failures` calls."""

    def __init__(self, error: BaseException, failures: int) -> None:
        self.error, self.failures, self.calls = error, failures, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "done"


def _no_sleep(_: float) -> None:
    pass


@pytest.mark.parametrize(
    "error",
    [
        ConnectionResetError(104, "Connection reset by peer"),
        TimeoutError("read timed out"),
        OSError("AWS Error NETWORK_CONNECTION during GetObject operation: curlCode: 56"),
        OSError("AWS Error SLOW_DOWN during PutObject operation: SlowDown"),
        OSError("When reading: HTTP response code: 503 ServiceUnavailable"),
        # As pyarrow 26's S3 client words GetObject failures (seen through the fault proxy in
        # tests/test_faults.py): the SDK's error type, often with an empty message.
        OSError("AWS Error INTERNAL_FAILURE during GetObject operation: "),
        OSError("AWS Error SERVICE_UNAVAILABLE during GetObject operation: "),
        OSError(
            "AWS Error SLOW_DOWN during GetObject operation: Please reduce your request rate. "
            "(Request ID: fm-flaky-proxy)"
        ),
        OSError(
            "When reading information for key 'a' in bucket 'b': AWS Error UNKNOWN "
            "(HTTP status 503) during HeadObject operation: No response body."
        ),
        OSError(
            "AWS Error NETWORK_CONNECTION during GetObject operation: curlCode: 28, Timeout was "
            "reached; Details: Operation too slow. Less than 1 bytes/sec transferred the last 3 "
            "seconds"
        ),
    ],
    ids=[
        "reset",
        "timeout",
        "s3-network",
        "s3-throttled",
        "s3-503",
        "get-500",
        "get-503",
        "get-slowdown",
        "head-503",
        "read-timeout",
    ],
)
def test_transient_failures_are_retried_until_they_pass(error: BaseException) -> None:
    operation = Flaky(error, failures=3)
    assert with_retries(operation, what="reading x", sleep=_no_sleep) == "done"
    assert operation.calls == 4


@pytest.mark.parametrize(
    "error",
    [
        gzip.BadGzipFile("Not a gzipped file (b'PK')"),
        OSError("AWS Error ACCESS_DENIED during GetObject operation: Access Denied"),
        FileNotFoundError("s3://bucket/never-landed.warc.gz"),
        ValueError("bad record"),
    ],
    ids=["bad-gzip", "access-denied", "missing-unpromised", "bad-data"],
)
def test_permanent_failures_are_raised_at_once(error: BaseException) -> None:
    operation = Flaky(error, failures=1)
    with pytest.raises(type(error)):
        with_retries(operation, what="reading x", sleep=_no_sleep)
    assert operation.calls == 1
    assert not is_transient(error)


def test_a_failure_that_persists_fails_loudly_naming_what_and_what_to_do() -> None:
    delays: list[float] = []
    operation = Flaky(ConnectionResetError(104, "Connection reset by peer"), failures=100)
    with pytest.raises(StorageUnavailable) as caught:
        with_retries(operation, what="reading s3://b/landing/a.warc.gz", sleep=delays.append)
    message = str(caught.value)
    assert "reading s3://b/landing/a.warc.gz failed 6 times" in message
    assert "Connection reset by peer" in message and "rerun" in message
    assert operation.calls == 6
    # Backoff: each wait longer than the one before (jitter is at most +-50%).
    assert len(delays) == 5 and delays[-1] > delays[0] * 4


@pytest.mark.parametrize(
    "error",
    [
        FileNotFoundError("landing/a.warc.gz"),  # HeadObject's 404
        OSError("AWS Error NO_SUCH_KEY during GetObject operation: The specified key does not"),
        OSError("AWS Error RESOURCE_NOT_FOUND during GetObject operation: "),  # body unread
    ],
    ids=["head-404", "get-nosuchkey", "get-404"],
)
def test_a_promised_object_not_found_yet_is_retried_then_named_as_missing(
    error: OSError,
) -> None:
    eventually = Flaky(error, failures=2)
    assert with_retries(eventually, what="reading a", must_exist=True, sleep=_no_sleep) == "done"
    unpromised = Flaky(error, failures=1)
    with pytest.raises(type(error)):
        with_retries(unpromised, what="reading a", sleep=_no_sleep)

    gone = Flaky(FileNotFoundError("landing/a.warc.gz"), failures=100)
    with pytest.raises(StorageUnavailable, match="listed as present but cannot be found"):
        with_retries(gone, what="reading a", must_exist=True, attempts=3, sleep=_no_sleep)


def test_a_commit_whose_answer_was_lost_is_not_applied_twice(
    fm_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog accepted the commit but the connection dropped before the answer: the retry
    finds the commit by its id instead of committing the files again."""
    from fm_loader.storage import retry

    monkeypatch.setattr(retry.time, "sleep", _no_sleep)
    handle = data_files.table_handle(fm_settings, "quarantine", "cloud")
    rows = quarantine_rows("b-1", 3)
    files = data_files.write_files(handle, rows, uuid.uuid4(), 0)
    real_lookup = data_files._snapshot_of_commit
    answers_lost = iter([False, True])  # before the commit: not there; after: the answer is lost

    def lookup(table, commit_id):  # type: ignore[no-untyped-def]
        if next(answers_lost, False):
            raise ConnectionResetError(104, "Connection reset by peer")
        return real_lookup(table, commit_id)

    monkeypatch.setattr(data_files, "_snapshot_of_commit", lookup)
    replace = catalog.where_equal("batch_id", "b-1")
    snapshot = data_files.commit_files(fm_settings, "quarantine", replace, files, {}, "cloud")

    table = catalog.load_table(fm_settings, "quarantine", namespace="cloud")
    assert catalog.read_table(fm_settings, "quarantine", replace, namespace="cloud").num_rows == 3
    assert table.current_snapshot().snapshot_id == snapshot  # type: ignore[union-attr]
    committed = [s for s in table.snapshots() if data_files.COMMIT_ID in (s.summary or {})]
    assert len({s.summary[data_files.COMMIT_ID] for s in committed}) == 1  # type: ignore[index]


def test_landed_file_missing_from_the_store_fails_the_read_not_quarantined(
    tmp_path: Path,
) -> None:
    """A landed file deleted behind the manifest's back: the raw stage raises, naming it."""
    from fm_assets.stages.raw import LANDED_PARTS, RawStage
    from fm_loader.storage import retry

    parts = pa.Table.from_pylist(
        [
            {
                "batch_id": "b-1",
                "file_name": "a.jsonl",
                "file_sha256": "0" * 64,
                "file_uri": (tmp_path / "gone.jsonl").as_uri(),
                "source": "s",
                "license": "CC0-1.0",
                "namespace": "cloud",
                "part": 0,
                "start": 0,
                "end": -1,
                "whole_file": True,
                "first_index": 0,
                "first_line": 1,
                "file_items": -1,
            }
        ],
        schema=LANDED_PARTS,
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(retry.time, "sleep", _no_sleep)
        with pytest.raises(StorageUnavailable, match=r"gone\.jsonl.*cannot be found"):
            RawStage().read(parts, {})
