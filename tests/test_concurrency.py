"""Batches processed at once still deduplicate exactly: no record is kept by two batches.

Three batches share records (the second holds both crawls, the first and third one each); their
raw stages run at the same time in three processes, in no particular order. Whatever order they
commit in, every distinct record is kept exactly once across the three batches.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from fm_assets.commands import operations
from fm_assets.execution import pipeline
from fm_assets.execution.runner import run_stage
from fm_assets.settings import load_settings
from fm_assets.storage import catalog
from tests.paths import WGET_WARC, WGET_WARC_2

pytestmark = pytest.mark.slow

RUN_RAW = """
import sys
from fm_assets.execution.runner import run_stage
from fm_assets.settings import load_settings
run_stage(load_settings(), "raw_documents", sys.argv[1])
"""


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FM_")}
    return env | {"FM_HOME": str(home)}


def test_batches_whose_raw_stages_run_at_once_keep_each_record_once(
    ray_address: str, tmp_path: Path
) -> None:
    # What one batch holding both crawls keeps: the distinct records.
    alone = load_settings(_env(tmp_path / "alone"))
    batch, _ = operations.land(alone, [WGET_WARC, WGET_WARC_2], source="wget", license="CC0-1.0")
    run_stage(alone, "raw_documents", batch.batch_id)
    distinct = set(
        catalog.read_table(alone, "raw_documents", namespace="cloud").column("doc_id").to_pylist()
    )

    home = tmp_path / "concurrent"
    settings = load_settings(_env(home))
    batches = [
        operations.land(settings, files, source="wget", license="CC0-1.0")[0].batch_id
        for files in ([WGET_WARC], [WGET_WARC, WGET_WARC_2], [WGET_WARC_2])
    ]
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", RUN_RAW, batch_id],
            env=_env(home),
            stderr=subprocess.PIPE,
            text=True,
        )
        for batch_id in reversed(batches)  # the latest published starts first
    ]
    errors = [run.communicate(timeout=600)[1] for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0], "\n\n".join(e[-4000:] for e in errors)

    kept = Counter(
        catalog.read_table(settings, "raw_documents", namespace="cloud")
        .column("doc_id")
        .to_pylist()
    )
    assert [doc for doc, n in kept.items() if n > 1] == [], "a record was kept by two batches"
    assert set(kept) == distinct
    quarantined = catalog.read_table(settings, "quarantine", namespace="cloud").to_pylist()
    duplicates = [r for r in quarantined if r["rule"] == "exact_duplicate"]
    # Every landed record is kept once or quarantined as a duplicate of the kept one.
    assert all(r["doc_id"] in kept for r in duplicates)


def test_a_rerun_of_the_raw_stage_keeps_what_its_own_batch_indexed_before(
    ray_address: str, tmp_path: Path
) -> None:
    """The batch's own `document_index` rows (from an earlier run, or from an attempt killed
    after committing them) are not "kept before": a rerun of the raw stage keeps every record the
    first run kept, instead of quarantining each as a duplicate of itself."""
    env = _env(tmp_path / "fm")
    settings = load_settings(env)
    batch, _ = operations.land(settings, [WGET_WARC], source="wget", license="CC0-1.0")
    first = run_stage(settings, "raw_documents", batch.batch_id)
    assert first.records_kept > 0 and first.records_quarantined == 0
    # Another raw config is another content key: the stage runs again over the same batch.
    changed = load_settings(env | {"FM_MAX_DOCUMENT_BYTES": str(16 * 1024 * 1024)})
    again = run_stage(changed, "raw_documents", batch.batch_id)
    assert not again.skipped
    assert (again.records_kept, again.records_quarantined) == (first.records_kept, 0)
    rules = catalog.read_table(settings, "quarantine", namespace="cloud").column("rule")
    assert "exact_duplicate" not in rules.to_pylist()


RUN_REQUEST = """
import sys, json
import dagster as dg
from fm_assets.defs import build_definitions
from fm_assets.defs.materialize import dagster_instance
from fm_assets.settings import load_settings

# What the daemon's run worker does with a sensor's run request: the job, in this process.
partition, tags = sys.argv[1], json.loads(sys.argv[2])
job = build_definitions().get_job_def("process_landing_batch")
result = job.execute_in_process(
    partition_key=partition, tags=tags, instance=dagster_instance(load_settings()),
    raise_on_error=False,
)
sys.exit(0 if result.success else 1)
"""


def _tick(instance: object, cursor: str | None) -> object:
    import dagster as dg

    from fm_assets.definitions import defs

    sensor = defs.resolve_sensor_def("new_landing_batch_sensor")
    context = dg.build_sensor_context(
        instance=instance,  # type: ignore[arg-type]
        cursor=cursor,
        resources={"fm": defs.resources["fm"]},
    )
    return sensor(context)


def test_two_sensor_ticks_racing_over_batches_landed_at_once_process_each_once(
    ray_address: str, tmp_path: Path
) -> None:
    """Two ticks evaluated from the same cursor (two daemons, or the UI's test tick beside the
    daemon's) both request every new batch; all their runs start at once. Each stage of each
    batch is committed once and a record the batches share is kept once."""
    import json

    from fm_assets.defs.materialize import dagster_instance
    from fm_assets.registries.tokenizers import register_tokenizer
    from fm_assets.storage.bookkeeping import stage_runs
    from tests.paths import NEOX_TOKENIZER, WARC_DIR

    page = WARC_DIR / "cc-main-2024-22-whirlwind.warc.gz"
    text = WARC_DIR / "cc-main-2024-22-whirlwind.warc.wet.gz"
    alone = load_settings(_env(tmp_path / "alone"))
    both, _ = operations.land(alone, [page, text], source="cc", license="CC0-1.0")
    run_stage(alone, "raw_documents", both.batch_id)
    distinct = set(
        catalog.read_table(alone, "raw_documents", namespace="cloud").column("doc_id").to_pylist()
    )

    home = tmp_path / "racing"
    env = _env(home) | {"DAGSTER_HOME": str(home / "dagster")}
    settings = load_settings(env)
    register_tokenizer(settings, NEOX_TOKENIZER, make_default=True)
    # Landed at once: both published before any tick; they share the page's record.
    batches = [
        operations.land(settings, files, source="cc", license="CC0-1.0")[0].batch_id
        for files in ([page], [page, text])
    ]
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        instance = dagster_instance(settings)
        ticks = [_tick(instance, None), _tick(instance, None)]
        for tick in ticks:  # what the daemon does with each tick's result before its runs
            for added in tick.dynamic_partitions_requests or []:  # type: ignore[attr-defined]
                instance.add_dynamic_partitions(
                    added.partitions_def_name, list(added.partition_keys)
                )
    requests = [r for tick in ticks for r in tick.run_requests or []]  # type: ignore[attr-defined]
    assert sorted(r.partition_key for r in requests) == sorted(batches * 2), "no race happened"

    runs = [
        subprocess.Popen(
            [sys.executable, "-c", RUN_REQUEST, r.partition_key, json.dumps(dict(r.tags))],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in requests
    ]
    errors = [run.communicate(timeout=900)[1] for run in runs]
    # A string, not a list: pytest shortens the repr of any other object to a few hundred chars.
    failed = "\n\n".join(
        f"run {n} ({r.partition_key}) exited {run.returncode}:\n{error[-4000:]}"
        for n, (r, run, error) in enumerate(zip(requests, runs, errors, strict=True))
        if run.returncode != 0
    )
    assert [run.returncode for run in runs] == [0] * len(runs), failed

    committed = Counter((r["batch_id"], r["stage"]) for r in stage_runs(settings))
    assert set(committed) == {(b, s) for b in batches for s in pipeline.STAGE_NAMES}
    assert [key for key, n in committed.items() if n > 1] == [], "a stage was committed twice"
    kept = Counter(
        catalog.read_table(settings, "raw_documents", namespace="cloud")
        .column("doc_id")
        .to_pylist()
    )
    assert [doc for doc, n in kept.items() if n > 1] == [], "a record was kept by two batches"
    assert set(kept) == distinct
    # A later tick sees both batches processed and requests nothing.
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        later = _tick(dagster_instance(settings), None)
    assert not later.run_requests  # type: ignore[attr-defined]
