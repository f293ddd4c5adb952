"""Cost attribution without a pipeline: the cache's usage record, splitting, prices, the table."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import pytest

from fm_assets.costs.measure import LANDING, SHARD_SET, TABLES, Holding, Measurements, StageCompute
from fm_assets.costs.prices import load_prices
from fm_assets.costs.report import QUANTITIES, attribute, render_table
from fm_assets.settings import Settings
from fm_loader.storage.cache_dir import make_room, set_quota
from fm_loader.storage.cache_usage import USAGE_NAME, Occupancy, occupancy

T0 = dt.datetime(2026, 5, 1, tzinfo=dt.UTC)


def _at(hours: float) -> float:
    return (T0 + dt.timedelta(hours=hours)).timestamp()


def _write_events(root: Path, events: list[dict[str, object]]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / USAGE_NAME).write_text("".join(json.dumps(e) + "\n" for e in events))


def test_byte_hours_come_from_the_caches_own_record(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    _write_events(
        root,
        [
            {"event": "stored", "entry": "a" * 64, "key": "web@v1/x", "uri": "s3://b/a",
             "bytes": 1000, "at": _at(0)},
            {"event": "stored", "entry": "b" * 64, "key": "web@v2/x", "uri": "s3://b/b",
             "bytes": 10, "at": _at(1)},
            {"event": "evicted", "entry": "a" * 64, "at": _at(3)},
            {"event": "stored", "entry": "a" * 64, "key": "web@v1/x", "uri": "s3://b/a",
             "bytes": 1000, "at": _at(5)},
        ],
    )  # fmt: skip
    found = {o.manifest_sha256[0]: o for o in occupancy(root, T0, T0 + dt.timedelta(hours=6))}
    # a: hours 0-3 and 5-6 at 1000 bytes; b: stored at hour 1, still there at the window's end.
    assert found["a"].byte_hours == pytest.approx(4000.0)
    assert found["b"].byte_hours == pytest.approx(50.0)
    assert found["a"].shard_set_key == "web@v1/x"
    # A window clips the stays: hours 2-4 hold a for one hour (evicted at 3) and b for two.
    clipped = {o.manifest_sha256[0]: o.byte_hours for o in occupancy(
        root, T0 + dt.timedelta(hours=2), T0 + dt.timedelta(hours=4))}  # fmt: skip
    assert clipped == pytest.approx({"a": 1000.0, "b": 20.0})


def test_an_eviction_is_recorded(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    entry = root / ("c" * 64)
    entry.mkdir(parents=True)
    (entry / "fm_cache_entry.json").write_text(json.dumps({"bytes": 500, "shard_set_key": "k"}))
    (entry / "shard.00000.mds").write_bytes(b"x" * 500)
    (entry / "fm_manifest.json").write_text("{}")
    set_quota(root, 100)
    evicted = make_room(root, keep="d" * 64)
    assert [e.manifest_sha256 for e in evicted] == ["c" * 64]
    lines = [json.loads(line) for line in (root / USAGE_NAME).read_text().splitlines()]
    assert [(e["event"], e["entry"]) for e in lines] == [("evicted", "c" * 64)]


def _measured() -> Measurements:
    owners = {"b1": ("alpha", "web"), "b2": ("beta", "stories"), "b3": ("beta", "web")}
    holdings = [
        Holding(LANDING, "b1", 1000, T0, batch="b1"),
        Holding(LANDING, "b2", 301, T0 + dt.timedelta(hours=10), batch="b2"),
        Holding(TABLES, "b2", 77, T0 + dt.timedelta(hours=11), batch="b2"),
        Holding(LANDING, "b3", 5, T0 + dt.timedelta(days=40), batch="b3"),  # after the window
        Holding(SHARD_SET, "mix@v1/c", 1001, T0 + dt.timedelta(hours=12), version="mix@v1"),
    ]
    cache = [Occupancy("e" * 64, "mix@v1/c", "s3://x", 1001, 3003.0)]
    compute = [
        StageCompute("b1", "raw_documents", T0 + dt.timedelta(hours=1), 12.5, 0.0),
        StageCompute("b2", "scored_pairs", T0 + dt.timedelta(hours=2), 3.0, 7.0),
        StageCompute("b2", "raw_documents", T0 - dt.timedelta(hours=2), 99.0, 0.0),  # before
    ]
    tokens = {"mix@v1": {"b1": 2, "b2": 1}}
    return Measurements(owners, holdings, cache, compute, tokens)


def test_team_rows_add_up_to_the_measured_totals() -> None:
    until = T0 + dt.timedelta(days=30)
    report = attribute(_measured(), T0, until)
    for name in QUANTITIES:
        assert sum(getattr(r, name) for r in report.rows) == pytest.approx(report.totals[name])
    teams = report.team_totals()
    assert teams["alpha"].landing_bytes == 1000 and teams["beta"].landing_bytes == 301
    # The shard set is split 2:1 by tokens, whole bytes, nothing lost.
    assert (teams["alpha"].shard_bytes, teams["beta"].shard_bytes) == (667, 334)
    assert teams["alpha"].cache_byte_hours == pytest.approx(2002.0)
    assert (teams["alpha"].cpu_seconds, teams["beta"].cpu_seconds) == (12.5, 3.0)
    assert teams["beta"].gpu_seconds == 7.0
    assert report.totals["landing_bytes"] == 1301  # b3 landed after the window
    # Storage byte-hours count from each holding's creation to the window's end.
    assert teams["alpha"].storage_byte_hours == pytest.approx(1000 * 720 + 1001 * 708 * 2 / 3)


def test_prices_turn_quantities_into_money(fm_settings: Settings, tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text(
        '[prices]\ncurrency = "EUR"\nstorage_gb_month = 730\ncache_gb_hour = 1\n'
        "cpu_hour = 3600\ngpu_hour = 7200\n"
    )
    settings = dataclasses.replace(fm_settings, prices_file=prices)
    report = attribute(_measured(), T0, T0 + dt.timedelta(days=30))
    report.prices = load_prices(settings)
    beta = report.team_totals()["beta"].costs(report.prices)
    assert beta is not None
    assert beta["compute"] == pytest.approx(3.0 + 14.0)  # 1 per CPU-second, 2 per GPU-second
    assert beta["cache"] == pytest.approx(1001.0e-9)
    table = render_table(report, "beta")
    assert "alpha" not in table and "storage EUR" in table and "TOTAL" in table
    prices.write_text('[prices]\ncurrency = "EUR"\ncpu_hour = -1\n')
    with pytest.raises(ValueError, match="lacks"):
        load_prices(settings)
