"""`fm ray` (this FM_HOME's local Ray: status, stop) and `fm gc` (unreferenced data files)."""

from __future__ import annotations

import datetime as dt

import click

from fm_assets.settings import load_settings


def _echo(message: str) -> None:
    click.echo(f"[fm {dt.datetime.now():%H:%M:%S}] {message}", err=True)


@click.command()
@click.option(
    "--older-than-hours",
    default=24.0,
    show_default=True,
    help="Grace period: files younger than this may belong to a run still in progress.",
)
@click.option("--dry-run", is_flag=True, help="List the orphans without deleting them.")
def gc(older_than_hours: float, dry_run: bool) -> None:
    """Delete data files no snapshot references (left by runs killed before their commit)."""
    from fm_assets.storage.orphans import sweep_orphans

    grace = dt.timedelta(hours=older_than_hours)
    report = sweep_orphans(load_settings(), grace=grace, dry_run=dry_run)
    for name, (files, size) in sorted(report.tables.items()):
        click.echo(f"{name}: {files} orphaned files, {size:,} bytes")
    verb = "found" if dry_run else "removed"
    _echo(f"{report.files} orphaned files ({report.bytes:,} bytes) {verb}")


@click.group("ray")
def ray_group() -> None:
    """This FM_HOME's local Ray, started by the first command that needs it and kept alive."""


@ray_group.command("stop")
def ray_stop() -> None:
    """Stop this FM_HOME's local Ray (the next command that needs Ray starts a new one)."""
    from fm_assets.execution.local_ray import stop_local_ray

    stopped = stop_local_ray(load_settings())
    _echo("stopped this FM_HOME's local Ray" if stopped else "no local Ray runs for this FM_HOME")


@ray_group.command("status")
def ray_status() -> None:
    """What this FM_HOME's local Ray runs: address, pid, uptime, memory, drivers, idle time."""
    from fm_assets.execution.ray_status import render_ray_status

    click.echo(render_ray_status(load_settings()))
