"""`fm cost`: what each team spent on storage, node cache and compute (docs/costs.md)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import click

from fm_assets.settings import load_settings


def _day(value: str | None, name: str) -> dt.datetime | None:
    if value is None:
        return None
    try:
        return dt.datetime.fromisoformat(value).replace(tzinfo=dt.UTC)
    except ValueError as exc:
        raise ValueError(f"{name} must be a date (YYYY-MM-DD), got {value!r}") from exc


@click.command()
@click.option("--team", default=None, help="Only this team's rows (default: every team).")
@click.option("--since", default=None, help="Window start, YYYY-MM-DD (default: 1st of month).")
@click.option("--until", default=None, help="Window end, YYYY-MM-DD (default: now).")
@click.option(
    "--cache-dir",
    "cache_dirs",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Node cache directories whose usage to count (default: $FM_LOADER_CACHE_DIR or "
    "~/.cache/fm_loader); repeat for several.",
)
@click.option("--json", "as_json", is_flag=True, help="The whole report as JSON.")
def cost(
    team: str | None,
    since: str | None,
    until: str | None,
    cache_dirs: tuple[str, ...],
    as_json: bool,
) -> None:
    """Storage, cache and compute per team, source and version, priced by FM_PRICES_FILE."""
    from fm_assets.costs.report import cost_report, render_table, report_json
    from fm_loader.storage.cache_dir import default_cache_dir

    dirs = [Path(d) for d in cache_dirs] or [default_cache_dir()]
    report = cost_report(load_settings(), dirs, _day(since, "--since"), _day(until, "--until"))
    if team is not None and team not in report.teams:
        raise ValueError(
            f"no team {team!r} has costs from {report.since:%Y-%m-%d}; teams: "
            f"{', '.join(report.teams) or 'none'} (a batch's team is set by fm land --team)"
        )
    click.echo(report_json(report) if as_json else render_table(report, team))
