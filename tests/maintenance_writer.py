"""A writer committing while maintenance runs: quarantine partitions of batches `w-0`, `w-1`,
..., each committed as a stage's first run commits it (its files added), then replaced as a
rerun replaces it (a delete and an append), as `execution.runner` commits.

    python -m tests.maintenance_writer COUNT        (FM_HOME from the env)

Prints `committed <batch> <rows>` after each commit, flushed.
"""

from __future__ import annotations

import sys
import uuid

from fm_assets.settings import load_settings
from fm_assets.storage import catalog, data_files
from tests.rows import quarantine_rows

NS = "cloud"


def rows_of(index: int, attempt: int) -> int:
    """How many rows partition `w-<index>` holds after commit `attempt` (0: first run)."""
    return 2 + index % 3 + attempt


def main(count: int) -> None:
    settings = load_settings()
    for index in range(count):
        batch = f"w-{index}"
        for attempt, replace in enumerate(
            (catalog.NOTHING, catalog.where_equal("batch_id", batch))
        ):
            handle = data_files.table_handle(settings, "quarantine", NS)
            rows = quarantine_rows(batch, rows_of(index, attempt))
            written = data_files.write_files(handle, rows, uuid.uuid4(), 0)
            tags = {"fm.batch_id": batch, "fm.stage": "raw_documents"}
            data_files.commit_files(settings, "quarantine", replace, written, tags, NS)
            print(f"committed {batch} {rows.num_rows}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
