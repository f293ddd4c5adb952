"""`fm lineage` (where a token came from, where a document went, what a run read) and `fm revoke`.

Lineage subcommands print one JSON object per line on stdout; progress goes to stderr. Platform
modules are imported inside each command: `fm --help` must stay fast.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import click

from fm_assets.settings import load_settings


def _echo(message: str) -> None:
    click.echo(f"[fm {dt.datetime.now():%H:%M:%S}] {message}", err=True)


def _print(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        click.echo(json.dumps(row, sort_keys=True, default=str))


@click.group()
def lineage() -> None:
    """Provenance: samples back to raw records, documents forward to samples and runs."""


@lineage.command("sample")
@click.argument("shard_set_key")
@click.argument("index", type=click.IntRange(min=0))
def lineage_sample(shard_set_key: str, index: int) -> None:
    """The documents in sample INDEX of SHARD_SET_KEY: spans, raw record, source, stage versions."""
    from fm_assets.shards.trace import describe_sample

    _print(describe_sample(load_settings(), shard_set_key, index))


@lineage.command("doc")
@click.argument("doc_id")
def lineage_doc(doc_id: str) -> None:
    """Every version, shard set and sample holding DOC_ID (or a raw sha256), and the runs that
    read those shard sets."""
    from fm_assets.shards.trace import places_of_document

    _print(places_of_document(load_settings(), doc_id))


@lineage.command("run")
@click.argument("run_id")
def lineage_run(run_id: str) -> None:
    """The versions, shard sets, Iceberg snapshots and positions training run RUN_ID read."""
    from fm_assets.shards.trace import describe_run

    _print(describe_run(load_settings(), run_id))


@lineage.command("revocations")
def lineage_revocations() -> None:
    """Every recorded revocation: who, when, why, and what it named."""
    from fm_assets.storage.revocations import read_revocations

    _print([vars(r) for r in read_revocations(load_settings())])


@click.command()
@click.option("--doc", "doc_id", default=None, help="A document (or image-text pair) id.")
@click.option(
    "--raw-sha256",
    "raw_sha256",
    default=None,
    help="The sha256 of landed bytes: a text document's, or an image's (every pair holding it).",
)
@click.option("--source", default=None, help="A source name, as landed.")
@click.option("--license", "license_", default=None, help="An SPDX licence id, as landed.")
@click.option("--batch", "batch_id", default=None, help="A landing batch id.")
@click.option(
    "--generator",
    "generator_model",
    default=None,
    help="A generator model id: everything it produced (any revision, prompt or seed).",
)
@click.option("--reason", required=True, help="Why: kept with the revocation for audits.")
@click.option(
    "--purge",
    "purge_too",
    is_flag=True,
    help="Then remove the documents' bytes from every artifact (`fm purge`).",
)
def revoke(
    doc_id: str | None,
    raw_sha256: str | None,
    source: str | None,
    license_: str | None,
    batch_id: str | None,
    generator_model: str | None,
    reason: str,
    purge_too: bool,
) -> None:
    """Revoke documents: replace every version and shard set holding them, mark the old ones.

    The revocation is a partition of the `revocation` asset; each replacement version and shard
    set is materialized through Dagster, with its blocking checks. With --purge the documents
    are then removed from every artifact, old versions' snapshots included (`fm purge`).
    """
    from fm_assets.commands.operations import revoke as run_revocation

    named = {
        "doc": doc_id,
        "raw": raw_sha256,
        "source": source,
        "license": license_,
        "batch": batch_id,
        "generator": generator_model,
    }
    chosen = [(k, v) for k, v in named.items() if v is not None]
    if len(chosen) != 1:
        raise ValueError(
            "name exactly one of --doc, --raw-sha256, --source, --license, --batch or "
            "--generator to revoke"
        )
    criterion, value = chosen[0]
    report = run_revocation(load_settings(), criterion, value, reason, _echo)
    click.echo(f"revocation {report.revocation.revocation_id}")
    for v in report.versions:
        click.echo(
            f"version {v.version_key} -> {v.replacement or 'none'} "
            f"({v.documents_removed} documents, {v.tokens_removed} tokens removed)"
        )
    for s in report.shard_sets:
        click.echo(
            f"shard_set {s['shard_set_key']} -> {s['replacement'] or 'none'} "
            f"(rewrote {s['bytes_rewritten']} of {s['bytes_total']} bytes, "
            f"{s['shards_rewritten']} of {s['shards_total']} shards)"
        )
    for run in report.runs:
        click.echo(f"run {run.run_id} read revoked shard set {run.shard_set_key}")
    if not report.versions:
        _echo("no dataset version holds what this revocation names; future versions leave it out")
    if purge_too:
        from fm_assets.commands.purge import run_purge

        run_purge(load_settings(), report.revocation.revocation_id)
