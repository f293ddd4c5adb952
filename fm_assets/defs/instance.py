"""The Dagster instance under FM_HOME: the CLI, `dagster dev` and tests all use the same one."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from fm_assets.settings import Settings

_REPO_DAGSTER_YAML = Path(__file__).resolve().parents[2] / "dagster.yaml"
_FALLBACK_YAML = """\
telemetry:
  enabled: false
"""


def ensure_dagster_home(settings: Settings) -> Path:
    """Create $FM_HOME/dagster with the project's dagster.yaml and point DAGSTER_HOME at it."""
    home = settings.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    target = home / "dagster.yaml"
    if _REPO_DAGSTER_YAML.is_file():
        if not target.exists() or target.read_bytes() != _REPO_DAGSTER_YAML.read_bytes():
            shutil.copyfile(_REPO_DAGSTER_YAML, target)
    elif not target.exists():
        target.write_text(_FALLBACK_YAML)
    os.environ["DAGSTER_HOME"] = str(home)
    os.environ.setdefault("FM_HOME", str(settings.home))
    return home


# Pools whose limit is not dagster.yaml's default_limit (dagster.yaml cannot name a pool).
POOL_LIMITS = {"neardup": 1}  # one batch at a time against the global near-dup index


def ensure_pool_limits(instance: Any) -> None:
    """Set the platform's per-pool limits on `instance` (idempotent)."""
    storage = instance.event_log_storage
    for pool, limit in POOL_LIMITS.items():
        info = storage.get_concurrency_info(pool)
        if info.slot_count != limit:
            storage.set_concurrency_slots(pool, limit)
