"""`fm maintain`: catalog maintenance now, as the daily `catalog_maintenance` job does it
(docs/maintenance.md)."""

from __future__ import annotations

import datetime as dt

import click

from fm_assets.settings import load_settings


def _echo(message: str) -> None:
    click.echo(f"[fm {dt.datetime.now():%H:%M:%S}] {message}", err=True)


@click.command()
@click.option("--dry-run", is_flag=True, help="Say what would be expired, merged and deleted.")
@click.option(
    "--retention",
    "retention_hours",
    type=click.FloatRange(min=0),
    default=None,
    help="Keep snapshots no version pins until they were superseded this many hours ago "
    "[default: FM_MAINTENANCE_RETENTION_HOURS, 168].",
)
@click.option(
    "--grace",
    "grace_hours",
    type=click.FloatRange(min=0),
    default=None,
    help="Delete unreferenced files only once this many hours old: younger ones may belong to "
    "a commit in progress [default: FM_MAINTENANCE_GRACE_HOURS, 24].",
)
@click.option("--namespace", default=None, help="Only this data namespace's tables.")
def maintain(
    dry_run: bool, retention_hours: float | None, grace_hours: float | None, namespace: str | None
) -> None:
    """Expire old snapshots no version pins, merge small files and manifests, delete files no
    live snapshot references; prints files and bytes per table before and after."""
    from fm_assets.defs.maintenance import MAINTAIN_OP
    from fm_assets.defs.materialize import execute_job

    if retention_hours is not None and retention_hours < 1 and not dry_run:
        _echo(
            "a retention under an hour can expire the snapshot a running stage or version cut "
            "started from: it then fails (nothing is lost; rerun it)"
        )
    config = {
        "retention_hours": retention_hours,
        "grace_hours": grace_hours,
        "namespace": namespace,
        "dry_run": dry_run,
    }
    report = execute_job(
        load_settings(),
        "catalog_maintenance",
        MAINTAIN_OP,
        {"ops": {MAINTAIN_OP: {"config": config}}},
        _echo,
    )
    click.echo(report.render())
    totals = report.totals()
    verb = "would delete" if dry_run else "deleted"
    _echo(
        f"{verb} {totals['files_deleted']} files ({totals['bytes_deleted']:,} bytes); snapshots "
        f"{totals['snapshots_before']} -> {totals['snapshots_after']}"
    )
