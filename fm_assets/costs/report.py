"""The cost table: measured quantities attributed to (team, source, version), priced.

A row with an empty version holds what its batches cost themselves (landing, tables, compute);
a row with a version holds its share of that version's shard sets, text sets and their cached
copies. Every figure of every row comes from exactly one measured holding, cache stay or stage
run, split without loss (bytes by largest remainder), so the rows add up to the measured totals.
Storage is charged by the byte-hours a holding spent in the window (from its creation on);
compute by the stage runs committed in the window.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fm_assets.costs.measure import (
    LANDING,
    SHARD_SET,
    TABLES,
    TEXT_SET,
    Measurements,
    measure,
)
from fm_assets.costs.prices import HOURS_PER_MONTH, Prices, load_prices
from fm_assets.settings import Settings
from fm_assets.storage.teams import UNASSIGNED

GB = 1e9
_BYTES = {LANDING: "landing_bytes", TABLES: "table_bytes", SHARD_SET: "shard_bytes",
          TEXT_SET: "text_bytes"}  # fmt: skip
QUANTITIES = (
    "landing_bytes",
    "table_bytes",
    "shard_bytes",
    "text_bytes",
    "storage_byte_hours",
    "cache_byte_hours",
    "cpu_seconds",
    "gpu_seconds",
)


@dataclass
class CostRow:
    """What one (team, source, version) holds and used in the window."""

    team: str
    source: str
    version: str  # "" for what batches cost themselves
    landing_bytes: int = 0
    table_bytes: int = 0
    shard_bytes: int = 0
    text_bytes: int = 0
    storage_byte_hours: float = 0.0
    cache_byte_hours: float = 0.0
    cpu_seconds: float = 0.0
    gpu_seconds: float = 0.0

    @property
    def stored_bytes(self) -> int:
        return self.landing_bytes + self.table_bytes + self.shard_bytes + self.text_bytes

    def costs(self, prices: Prices | None) -> dict[str, float] | None:
        """Storage, cache and compute cost of the row, and their total; None without prices."""
        if prices is None:
            return None
        storage = self.storage_byte_hours / GB / HOURS_PER_MONTH * prices.storage_gb_month
        cache = self.cache_byte_hours / GB * prices.cache_gb_hour
        compute = (
            self.cpu_seconds / 3600 * prices.cpu_hour + self.gpu_seconds / 3600 * prices.gpu_hour
        )
        return {"storage": storage, "cache": cache, "compute": compute,
                "total": storage + cache + compute}  # fmt: skip


@dataclass
class CostReport:
    since: dt.datetime
    until: dt.datetime
    rows: list[CostRow]
    totals: dict[str, float]  # each quantity as measured, before attribution
    prices: Prices | None = None
    teams: list[str] = field(default_factory=list)

    def for_team(self, team: str | None) -> list[CostRow]:
        return [r for r in self.rows if team is None or r.team == team]

    def team_totals(self) -> dict[str, CostRow]:
        totals: dict[str, CostRow] = {}
        for row in self.rows:
            total = totals.setdefault(row.team, CostRow(row.team, "*", "*"))
            for name in QUANTITIES:
                setattr(total, name, getattr(total, name) + getattr(row, name))
        return dict(sorted(totals.items()))

    def as_json(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "currency": self.prices.currency if self.prices else None,
            "prices": dataclasses.asdict(self.prices) if self.prices else None,
            "rows": [{**dataclasses.asdict(r), "costs": r.costs(self.prices)} for r in self.rows],
            "teams": {
                t: {**dataclasses.asdict(r), "costs": r.costs(self.prices)}
                for t, r in self.team_totals().items()
            },
            "measured_totals": self.totals,
        }


def _hours_in(created: dt.datetime, since: dt.datetime, until: dt.datetime) -> float:
    return max(0.0, (until - max(created, since)).total_seconds() / 3600)


def _split_int(value: int, weights: dict[Any, int]) -> dict[Any, int]:
    """`value` split by `weights`, the parts adding up to it exactly (largest remainder)."""
    total = sum(weights.values())
    if total == 0:
        return {}
    parts = {k: value * w // total for k, w in weights.items()}
    order = sorted(weights, key=lambda k: (-(value * weights[k] % total), str(k)))
    for k in order[: value - sum(parts.values())]:
        parts[k] += 1
    return parts


def _split_float(value: float, weights: dict[Any, int]) -> dict[Any, float]:
    total = sum(weights.values())
    return {k: value * w / total for k, w in weights.items()} if total else {}


def attribute(measured: Measurements, since: dt.datetime, until: dt.datetime) -> CostReport:
    """Every measured figure on the rows it belongs to, with the measured totals beside."""
    rows: dict[tuple[str, str, str], CostRow] = {}

    def row(owner: tuple[str, str], version: str) -> CostRow:
        key = (*owner, version)
        return rows.setdefault(key, CostRow(owner[0], owner[1], version))

    def owners_of(version: str) -> dict[tuple[str, str], int]:
        weights: dict[tuple[str, str], int] = {}
        for batch, tokens in measured.version_tokens.get(version, {}).items():
            owner = measured.owners.get(batch, (UNASSIGNED, "-"))
            weights[owner] = weights.get(owner, 0) + tokens
        return weights or {(UNASSIGNED, "-"): 1}

    totals = dict.fromkeys(QUANTITIES, 0.0)
    for holding in measured.holdings:
        if holding.created >= until:
            continue
        column = _BYTES[holding.kind]
        byte_hours = holding.bytes * _hours_in(holding.created, since, until)
        totals[column] += holding.bytes
        totals["storage_byte_hours"] += byte_hours
        if holding.batch is not None:
            target = row(measured.owners[holding.batch], "")
            setattr(target, column, getattr(target, column) + holding.bytes)
            target.storage_byte_hours += byte_hours
            continue
        weights = owners_of(str(holding.version))
        for owner, part in _split_int(holding.bytes, weights).items():
            target = row(owner, str(holding.version))
            setattr(target, column, getattr(target, column) + part)
        for owner, share in _split_float(byte_hours, weights).items():
            row(owner, str(holding.version)).storage_byte_hours += share
    for stay in measured.cache:
        version = stay.shard_set_key.split("/", 1)[0]
        totals["cache_byte_hours"] += stay.byte_hours
        for owner, share in _split_float(stay.byte_hours, owners_of(version)).items():
            row(owner, version).cache_byte_hours += share
    for run in measured.compute:
        if not since <= run.committed_at < until:
            continue
        target = row(measured.owners.get(run.batch, (UNASSIGNED, "-")), "")
        target.cpu_seconds += run.cpu_seconds
        target.gpu_seconds += run.gpu_seconds
        totals["cpu_seconds"] += run.cpu_seconds
        totals["gpu_seconds"] += run.gpu_seconds
    ordered = [rows[k] for k in sorted(rows)]
    return CostReport(since, until, ordered, totals, teams=sorted({r.team for r in ordered}))


def month_start(at: dt.datetime) -> dt.datetime:
    """Midnight UTC of the first day of `at`'s month: `fm cost`'s default window start."""
    return at.astimezone(dt.UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def cost_report(
    settings: Settings,
    cache_dirs: list[Path],
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
) -> CostReport:
    """The priced cost table of [since, until) (default: this month so far)."""
    until = until or dt.datetime.now(dt.UTC)
    since = since or month_start(until)
    if since >= until:
        raise ValueError(f"--since {since:%Y-%m-%d} is not before {until:%Y-%m-%d %H:%M} UTC")
    report = attribute(measure(settings, cache_dirs, since, until), since, until)
    report.prices = load_prices(settings)
    return report


def render_table(report: CostReport, team: str | None = None) -> str:
    """The table `fm cost` prints: a line per (team, source, version), each team's total,
    and the total of every team shown."""
    money = report.prices is not None
    head = [
        "team",
        "source",
        "version",
        "stored GB",
        "storage GB-h",
        "cache GB-h",
        "CPU h",
        "GPU h",
    ]
    if money:
        head += [f"storage {report.prices.currency}", "cache", "compute", "total"]  # type: ignore[union-attr]

    def cells(r: CostRow) -> list[str]:
        values = [r.team, r.source, r.version or "-", f"{r.stored_bytes / GB:.3f}",
                  f"{r.storage_byte_hours / GB:.3f}", f"{r.cache_byte_hours / GB:.3f}",
                  f"{r.cpu_seconds / 3600:.4f}", f"{r.gpu_seconds / 3600:.4f}"]  # fmt: skip
        costs = r.costs(report.prices)
        if costs is not None:
            values += [f"{costs[k]:.4f}" for k in ("storage", "cache", "compute", "total")]
        return values

    shown = report.for_team(team)
    lines = [head, *[cells(r) for r in shown]]
    totals = report.team_totals()
    for name in sorted({r.team for r in shown}):
        lines.append(cells(dataclasses.replace(totals[name], source="TOTAL", version="")))
    if team is None and len(totals) > 1:
        everything = CostRow("ALL", "TOTAL", "")
        for t in totals.values():
            for name in QUANTITIES:
                setattr(everything, name, getattr(everything, name) + getattr(t, name))
        lines.append(cells(everything))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    window = f"{report.since:%Y-%m-%d %H:%M} to {report.until:%Y-%m-%d %H:%M} UTC"
    text = [f"costs from {window}" + ("" if money else " (no FM_PRICES_FILE: quantities only)")]
    text += ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines]
    return "\n".join(text)


def report_json(report: CostReport) -> str:
    return json.dumps(report.as_json(), indent=1, sort_keys=True, default=str)
