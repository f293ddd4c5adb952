"""`fm approve`: decide on a quarantined landing batch that waits after validation."""

from __future__ import annotations

import datetime as dt

import click

from fm_assets.settings import load_settings


def _echo(message: str) -> None:
    click.echo(f"[fm {dt.datetime.now():%H:%M:%S}] {message}", err=True)


@click.command()
@click.argument("batch_id")
@click.option("--reason", required=True, help="Why: kept with the decision for audits.")
@click.option("--reject", is_flag=True, help="Reject the batch: it never reaches curation.")
def approve(batch_id: str, reason: str, reject: bool) -> None:
    """Approve (or --reject) a quarantined batch; an approved one runs through curation now."""
    from fm_assets.curation.approval import record_decision

    settings = load_settings()
    row = record_decision(settings, batch_id, approved=not reject, reason=reason)
    _echo(f"batch {batch_id} {row['decision']} by {row['decided_by']}: {reason}")
    if not reject:
        from fm_assets.commands.operations import run_batch

        run_batch(settings, batch_id, _echo)
        _echo(f"batch {batch_id}: all stages and checks passed")
    click.echo(batch_id)
