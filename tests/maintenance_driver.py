"""The process the maintenance crash test kills: one maintenance run of FM_HOME (from the env).

    python -m tests.maintenance_driver

Every progress message of the run is printed on stdout, flushed, as `fm-crash: progress
<message>` (each table's steps: rewriting, expiring snapshots, deleting unreferenced files),
then `fm-crash: end maintain`: how the killer picks its moment. Everything superseded is old
enough to go and small files are merged, so every step has work on the test's FM_HOME.
"""

from __future__ import annotations

import datetime as dt

from fm_assets.settings import load_settings
from fm_assets.storage.maintenance.policy import MaintenancePolicy
from fm_assets.storage.maintenance.run import maintain

POLICY = MaintenancePolicy(
    retention=dt.timedelta(0), grace=dt.timedelta(0), min_files=2, merge_manifests_at=2
)


def main() -> None:
    maintain(
        load_settings(),
        POLICY,
        progress=lambda message: print(f"fm-crash: progress {message}", flush=True),
    )
    print("fm-crash: end maintain", flush=True)


if __name__ == "__main__":
    main()
