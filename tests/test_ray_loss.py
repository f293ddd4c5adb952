"""A run whose driver loses the Ray cluster mid-stage (the head crashes) is retried by Dagster
once the head is back, and completes with every record kept or quarantined once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fm_assets.execution.pipeline  # noqa: F401  # declares the stage tables read below
from fm_assets.settings import load_settings
from fm_assets.storage import catalog
from fm_assets.storage.bookkeeping import latest_stage_run
from fm_assets.storage.landing import land_files
from fm_assets.storage.objectstore import open_object_store
from tests.paths import REPO
from tests.services.ray_cluster import restartable_head

# A run of the raw stage of a batch through Dagster in-process, as `fm run` makes it (which
# runs every stage the same way), printing its progress.
DRIVER = """
import logging, sys
from fm_assets.defs.landing import BATCH_TAG
from fm_assets.defs.materialize import add_partitions, materialize
from fm_assets.defs.partitions import landing_batches
from fm_assets.settings import load_settings

class Print(logging.Handler):
    def emit(self, record):
        print("progress", record.getMessage(), flush=True)

logging.getLogger("fm.progress").addHandler(Print())
logging.getLogger("fm.progress").setLevel(logging.INFO)
settings, batch = load_settings(), sys.argv[1]
add_partitions(settings, landing_batches, [batch])
materialize(settings, ["raw_documents"], batch, print, tags={BATCH_TAG: batch})
print("DONE", flush=True)
"""
FILES, PER_FILE, REPEATED = 4, 800, 40


def _documents(directory: Path) -> list[Path]:
    """JSONL files of distinct documents, and the first `REPEATED` of them again in the last
    file: exact duplicates, quarantined by the raw stage."""
    directory.mkdir(parents=True)
    lines = [
        json.dumps({"id": f"{f}-{d}", "text": f"document {d} of file {f}: " + "words " * 40})
        for f in range(FILES)
        for d in range(PER_FILE)
    ]
    paths = []
    for f in range(FILES):
        path = directory / f"part-{f}.jsonl"
        mine = lines[f * PER_FILE : (f + 1) * PER_FILE]
        again = lines[:REPEATED] if f == FILES - 1 else []
        path.write_text("\n".join(mine + again) + "\n")
        paths.append(path)
    return paths


def _raised_at(path: Path, error: BaseException) -> BaseException:
    """`error`, raised (and caught) in code that says it lives at `path`."""
    try:
        exec(compile("raise error", str(path), "exec"), {"error": error})
    except BaseException as caught:
        return caught
    raise AssertionError("not raised")


def test_a_lost_cluster_is_told_from_a_failing_stage() -> None:
    import grpc
    import ray
    import ray.exceptions as errors

    from fm_assets.execution.ray_loss import lost_cluster
    from fm_assets.storage.locks import LockLost

    inside_ray = Path(ray.__file__).parent / "util" / "client" / "dataclient.py"
    assert lost_cluster(errors.LocalRayletDiedError())
    assert lost_cluster(_raised_at(inside_ray, ConnectionError("Client is shutting down.")))
    # Ray Client back on a new server, which knows none of the driver's objects.
    assert lost_cluster(_raised_at(inside_ray, grpc.RpcError("NOT_FOUND")))
    try:  # the stage's own exception, raised while handling Ray's: still a lost cluster
        try:
            raise errors.LocalRayletDiedError()
        except errors.RayError as exc:
            raise RuntimeError("the stage stopped") from exc
    except RuntimeError as chained:
        assert lost_cluster(chained)
    # Not Ray's: a stage's failure, a connection error of the stage's own, a lost lock.
    assert not lost_cluster(ValueError("bad input"))
    assert not lost_cluster(_raised_at(Path(__file__), ConnectionResetError("peer reset")))
    assert not lost_cluster(_raised_at(Path(grpc.__file__), grpc.RpcError("another service")))
    assert not lost_cluster(LockLost("lost the lock 'stage x of batch y'"))


@pytest.mark.slow
def test_a_run_that_loses_the_ray_head_is_retried_and_completes(tmp_path: Path) -> None:
    import dagster as dg

    home = tmp_path / "fm"
    with restartable_head(cpus=2) as head:
        env = {
            **os.environ,
            "FM_HOME": str(home),
            # Ray Client, as the run pods join the cluster; it gives up on a dead server after
            # 5 s instead of 30, and the step runs again 3 s after that.
            "RAY_ADDRESS": head.client_address,
            "RAY_AUTH_MODE": "disabled",
            "RAY_CLIENT_RECONNECT_GRACE_PERIOD": "5",
            "FM_RAY_LOST_RETRY_S": "3",
            "FM_SLICE_BYTES": str(256 << 10),  # a stage of several tasks
        }
        for name in ("DAGSTER_HOME", "FM_CATALOG_URI", "FM_OBJECT_STORE", "FM_WAREHOUSE"):
            env.pop(name, None)
        settings = load_settings(env)
        paths = _documents(tmp_path / "crawl")
        manifest, _ = land_files(open_object_store(settings), paths, source="t", license="CC0-1.0")
        driver = subprocess.Popen(
            [sys.executable, "-c", DRIVER, manifest.batch_id],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        said: list[str] = []
        try:
            assert driver.stdout is not None
            for line in driver.stdout:
                said.append(line.rstrip())
                if line.startswith("progress scan: ") and " done" in line:
                    break
            else:
                raise AssertionError("the stage ended before its first task:\n" + "\n".join(said))
            head.kill()  # mid-stage: the head and everything on it die at once
            head.start()  # and a new head comes back at the same address
            said += [line.rstrip() for line in driver.stdout]
            assert driver.wait(timeout=300) == 0, "\n".join(said[-40:])
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait()
    assert "DONE" in said
    lost = [line for line in said if "lost the Ray cluster" in line]
    assert lost, "\n".join(said[-40:])
    assert "this step runs again in 3 s" in lost[0]

    # Dagster retried the step within the run, which succeeded.
    instance = dg.DagsterInstance.from_config(str(home / "dagster"))
    try:
        (run,) = instance.get_runs()
        assert run.status == dg.DagsterRunStatus.SUCCESS
        # Once, or again while the head was still starting.
        retried = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_UP_FOR_RETRY)
        assert 1 <= len(retried) == len(lost)
    finally:
        instance.dispose()

    # Nothing lost, nothing doubled: every record kept or quarantined, each once.
    records = FILES * PER_FILE + REPEATED
    done = latest_stage_run(settings, manifest.batch_id, "raw_documents")
    assert done is not None
    assert done["records_in"] == records
    assert done["records_kept"] + done["records_quarantined"] == records
    assert done["records_quarantined"] == REPEATED  # the exact duplicates
    kept = catalog.read_batch(settings, "raw_documents", manifest.batch_id, columns=("doc_id",))
    assert kept.num_rows == done["records_kept"] == FILES * PER_FILE
    assert len(set(kept.column("doc_id").to_pylist())) == kept.num_rows
    quarantined = catalog.read_batch(settings, "quarantine", manifest.batch_id)
    assert quarantined.num_rows == REPEATED
    assert len(set(quarantined.column("record_id").to_pylist())) == REPEATED
