"""`fm purge REVOCATION_ID`: a revocation's documents physically removed from every artifact,
through the `purge` Dagster job (so the run, its progress and its audit show in the UI).
`fm revoke ... --purge` runs it right after the revocation."""

from __future__ import annotations

import datetime as dt

import click

from fm_assets.settings import Settings, load_settings


def _echo(message: str) -> None:
    click.echo(f"[fm {dt.datetime.now():%H:%M:%S}] {message}", err=True)


def run_purge(settings: Settings, revocation_id: str) -> None:
    """Purge through Dagster and print what went and what remains."""
    from fm_assets.defs.materialize import execute_job
    from fm_assets.defs.provenance import PURGE_OP

    config = {"ops": {PURGE_OP: {"config": {"revocation_id": revocation_id}}}}
    report = execute_job(settings, "purge", PURGE_OP, config, _echo)
    totals = report.totals()
    click.echo(
        f"purged {revocation_id}: {totals['documents']} documents, {totals['rows_removed']} rows "
        f"of {totals['tables_rewritten']} tables, {totals['sets_rewritten']} shard and text sets, "
        f"{totals['landed_files']} landed files; {totals['bytes_removed']:,} bytes removed, "
        f"{totals['files_deleted']} files deleted (by {report.purged_by})"
    )
    for batch, landed in report.landed:
        click.echo(f"landed {batch}/{landed.name}: {landed.outcome} ({landed.detail})")
    for version in report.versions:
        click.echo(f"version {version}: still readable, without the purged documents")
    for line in report.remaining:
        click.echo(f"remains: {line}")


@click.command()
@click.argument("revocation_id")
def purge(revocation_id: str) -> None:
    """Remove REVOCATION_ID's documents from every table snapshot, index, quarantine row, shard
    and text set and landed file (`fm lineage revocations` lists revocations)."""
    run_purge(load_settings(), revocation_id)
