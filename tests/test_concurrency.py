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
    distinct = set(catalog.read_table(alone, "raw_documents").column("doc_id").to_pylist())

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
    assert [run.returncode for run in runs] == [0, 0, 0], errors

    kept = Counter(catalog.read_table(settings, "raw_documents").column("doc_id").to_pylist())
    assert [doc for doc, n in kept.items() if n > 1] == [], "a record was kept by two batches"
    assert set(kept) == distinct
    quarantined = catalog.read_table(settings, "quarantine").to_pylist()
    duplicates = [r for r in quarantined if r["rule"] == "exact_duplicate"]
    # Every landed record is kept once or quarantined as a duplicate of the kept one.
    assert all(r["doc_id"] in kept for r in duplicates)
