"""Prices per unit, from the file FM_PRICES_FILE names (an example: deploy/prices.example.toml).

    [prices]
    currency = "USD"
    storage_gb_month = 0.023    # object store, per GB (1e9 bytes) held for a month (730 hours)
    cache_gb_hour = 0.0002      # node cache (local NVMe), per GB held for an hour
    cpu_hour = 0.048            # per CPU-hour of stage work
    gpu_hour = 2.50             # per GPU-hour of stage work

No price lives in the code: without the file, `fm cost` reports the measured quantities only.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass

from fm_assets.settings import Settings

HOURS_PER_MONTH = 730.0  # what cloud object stores bill a month of storage as
_UNITS = ("storage_gb_month", "cache_gb_hour", "cpu_hour", "gpu_hour")


@dataclass(frozen=True)
class Prices:
    """What one unit of each measured quantity costs, in `currency`."""

    currency: str
    storage_gb_month: float
    cache_gb_hour: float
    cpu_hour: float
    gpu_hour: float


def load_prices(settings: Settings) -> Prices | None:
    """The prices of FM_PRICES_FILE, or None when it is not set; errors name the file and key."""
    path = settings.prices_file
    if path is None:
        return None
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read FM_PRICES_FILE {path}: {exc}") from exc
    table = document.get("prices")
    if not isinstance(table, dict):
        raise ValueError(f"{path}: no [prices] table (see deploy/prices.example.toml)")
    missing = [k for k in ("currency", *_UNITS) if k not in table]
    unknown = sorted(set(table) - {"currency", *_UNITS})
    if missing or unknown:
        raise ValueError(f"{path}: [prices] lacks {missing}, has unknown keys {unknown}")
    bad = [
        k
        for k in _UNITS
        if isinstance(table[k], bool) or not isinstance(table[k], int | float) or table[k] < 0
    ]
    if bad or not isinstance(table["currency"], str):
        raise ValueError(f"{path}: [prices] {bad or ['currency']} must be numbers >= 0 (text)")
    return Prices(table["currency"], *(float(table[k]) for k in _UNITS))
