"""The `fm` command: land files, run batches, cut versions, build shard sets, inspect state.

Long steps run through Dagster in-process (`defs.materialize`) against the instance under FM_HOME,
so every run the CLI makes shows up in the Dagster UI with its checks and lineage. Each subcommand
imports what it runs when it runs: `fm land` and `fm --help` must not pay for Dagster and Ray.
An expected failure (bad input, a failed check, a missing precondition) prints one line that says
what to do and exits 1; full traces go to $FM_HOME/logs.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
from pathlib import Path
from typing import Any

import click

from fm_assets.commands.approval import approve
from fm_assets.commands.backup import backup
from fm_assets.commands.cache import cache, text
from fm_assets.commands.classifier import classifier
from fm_assets.commands.cost import cost
from fm_assets.commands.dev import dev
from fm_assets.commands.land_options import (
    LandProvenance,
    check_provenance,
    land_provenance_options,
)
from fm_assets.commands.lineage import lineage, revoke
from fm_assets.commands.maintain import maintain
from fm_assets.commands.metrics import metrics
from fm_assets.commands.probe import loader
from fm_assets.commands.purge import purge
from fm_assets.commands.ray import gc, ray_group
from fm_assets.settings import Settings, load_settings


def _echo(message: str) -> None:
    click.echo(f"[fm {dt.datetime.now():%H:%M:%S}] {message}", err=True)


class _Progress(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        _echo(record.getMessage())


def _expected(exc: Exception) -> bool:
    """Failures a user fixes (bad input or settings, failed checks): one line, no trace."""
    if isinstance(exc, ValueError):
        return True
    from fm_assets.defs.materialize import ChecksFailed

    return isinstance(exc, ChecksFailed)


class _Commands(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            if not _expected(exc):
                raise
            _echo(str(exc))
            sys.exit(1)


def _launch_ray(settings: Settings) -> None:
    """Begin starting this FM_HOME's local Ray (unless RAY_ADDRESS names a cluster), so that it
    starts while the command loads Dagster."""
    if not settings.ray_address:
        from fm_assets.execution.local_ray import launch_local_ray

        launch_local_ray(settings)


@click.group(cls=_Commands)
def main() -> None:
    """fm platform: curate raw web and text data into MDS shard sets."""
    progress = logging.getLogger("fm.progress")
    if not progress.handlers:
        progress.addHandler(_Progress())
        progress.setLevel(logging.INFO)
        progress.propagate = False
    from fm_assets.storage.services import ConfigurationError, check_services

    # Production settings are probed before any work: a wrong credential or an unreachable
    # service fails here within seconds, naming the setting (a no-op on embedded settings).
    try:
        check_services(load_settings())
    except (ConfigurationError, ValueError) as exc:
        _echo(str(exc))
        sys.exit(1)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--source", required=True, help="Where the data comes from, e.g. commoncrawl.")
@click.option("--license", "license_", required=True, help="SPDX id or licence name.")
@click.option(
    "--namespace",
    default="cloud",
    show_default=True,
    help="The data namespace (cloud, on-device, web-unverified, quarantine, ...).",
)
@click.option(
    "--modality",
    type=click.Choice(["text", "image-text"]),
    default=None,
    help="What the files hold; detected from their content when omitted (WebDataset tars and "
    "Parquet files of image bytes are image-text, WARC/JSONL/HTML/text are text).",
)
@land_provenance_options
def land(
    paths: tuple[str, ...],
    source: str,
    license_: str,
    namespace: str,
    modality: str | None,
    provenance: LandProvenance,
) -> None:
    """Copy files into an immutable landing batch; prints the batch id last."""
    # Straight to the landing zone: `commands.operations` would load Dagster (seconds).
    from fm_assets.commands.modality import batch_modality
    from fm_assets.storage.landing import land_files
    from fm_assets.storage.objectstore import open_object_store
    from fm_assets.storage.teams import record_team

    files, settings = [Path(p) for p in paths], load_settings()
    store, team = open_object_store(settings), check_provenance(settings, provenance)
    manifest, created = land_files(
        store,
        files,
        source=source,
        license=license_,
        namespace=namespace,
        modality=batch_modality(files, modality),
        generator=provenance.generator,
        before_publish=lambda batch_id: record_team(store, batch_id, team),
    )
    _echo(
        f"{'landed' if created else 'already landed'} {len(manifest.files)} {manifest.modality} "
        f"files, {manifest.total_bytes:,} bytes, team {team}"
        + (f", generator {manifest.generator.model}" if manifest.generator else "")
    )
    click.echo(manifest.batch_id)


@main.command()
@click.option("--batch", "batch_id", required=True, help="Landing batch id (from `fm land`).")
def run(batch_id: str) -> None:
    """Process one landing batch through every stage; exits 1 when a blocking check fails."""
    from fm_assets.execution.preflight import DefaultClassifierMissing, check_run_preconditions

    settings = load_settings()
    try:
        check_run_preconditions(settings, batch_id)  # before Dagster is even imported: fast
    except DefaultClassifierMissing:
        from fm_assets.commands.operations import train_default_classifier

        train_default_classifier(settings, _echo)
        check_run_preconditions(settings, batch_id)
    from fm_assets.checks.table import batch_up_to_date

    if batch_up_to_date(settings, batch_id):
        _echo(f"batch {batch_id}: every stage up to date and every check passed; nothing to do")
    else:
        _launch_ray(settings)
        from fm_assets.commands.operations import run_batch

        run_batch(settings, batch_id, _echo, check_preconditions=False)
    _echo(f"batch {batch_id}: all stages and checks passed")
    click.echo(batch_id)


@main.group()
def version() -> None:
    """Dataset versions."""


@version.command("create")
@click.argument("dataset")
@click.option("--batches", default="", help="Comma-separated batch ids (default: all passing).")
@click.option(
    "--modality",
    type=click.Choice(["text", "image-text"]),
    default=None,
    help="Cut over the passing batches of this modality (a version holds one); needed when "
    "both have passing batches and --batches is not given.",
)
def version_create(dataset: str, batches: str, modality: str | None) -> None:
    """Cut an immutable version DATASET@vN; prints the version key last."""
    from fm_assets.versions.dataset_version import choose_batches, next_version_key

    settings = load_settings()
    chosen = [b.strip() for b in batches.split(",") if b.strip()]
    # Refuse an empty version before Dagster is even imported.
    choose_batches(settings, next_version_key(settings, dataset), chosen, modality)
    from fm_assets.commands.operations import create_version

    key = create_version(settings, dataset, chosen, _echo, modality)
    click.echo(key)


@main.group()
def shards() -> None:
    """MDS shard sets."""


@shards.command("build")
@click.argument("version_key")
@click.option("--tokenizer", required=True, help="tokenizer.json path or a registered hash.")
@click.option("--seq-len", type=int, required=True)
def shards_build(version_key: str, tokenizer: str, seq_len: int) -> None:
    """Pack a version into MDS shards; prints the shard set key last."""
    settings = load_settings()
    from fm_assets.commands.operations import build_shards

    key = build_shards(settings, version_key, tokenizer, seq_len, _echo)
    click.echo(key)


@main.group()
def tokenizer() -> None:
    """The tokenizer registry."""


@tokenizer.command("register")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--default", "make_default", is_flag=True, help="Use it for new batches.")
def tokenizer_register(path: str, make_default: bool) -> None:
    """Register a HF tokenizer.json by content hash; prints the hash last."""
    from fm_assets.registries.tokenizers import register_tokenizer

    info = register_tokenizer(load_settings(), Path(path), make_default=make_default)
    _echo(f"{info.name}: vocab {info.vocab_size}{', default' if make_default else ''}")
    click.echo(info.tokenizer_hash)


@tokenizer.command("train")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--out", required=True, type=click.Path(dir_okay=False))
@click.option("--vocab-size", default=8192, show_default=True)
def tokenizer_train(paths: tuple[str, ...], out: str, vocab_size: int) -> None:
    """Train a byte-level BPE tokenizer on text or JSONL files (for demos without a tokenizer)."""
    from fm_assets.commands.demo import train_tokenizer

    train_tokenizer([Path(p) for p in paths], Path(out), vocab_size)
    click.echo(out)


@main.group()
def registry() -> None:
    """The contamination registry: held-out eval sets that must never reach training data."""


@registry.command("add")
@click.argument("name")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--fields", required=True, help="Comma-separated text fields, e.g. question,answer.")
def registry_add(name: str, path: str, fields: str) -> None:
    """Register eval set NAME from PATH (JSONL, JSONL.gz, Arrow or Parquet); prints NAME last.

    Every dataset version is then re-scanned by the contamination_registry_sensor (under
    `fm dev`), and the next run of any batch decontaminates against it.
    """
    from fm_assets.commands.operations import register_benchmark

    names = [f.strip() for f in fields.split(",") if f.strip()]
    register_benchmark(load_settings(), name, Path(path), names, _echo)
    click.echo(name)


@main.command()
@click.argument("table")
@click.option("--batch", "batch_id", default=None)
@click.option("--version", "version_key", default=None)
@click.option("--namespace", default=None, help="Only this data namespace's copy of the table.")
@click.option("--out", required=True, type=click.Path(dir_okay=False))
def export(
    table: str, batch_id: str | None, version_key: str | None, namespace: str | None, out: str
) -> None:
    """Dump a table (optionally one batch, one version or one data namespace) as JSONL."""
    from fm_assets.commands.export import export_table

    count = export_table(
        load_settings(),
        table,
        Path(out),
        batch_id=batch_id,
        version_key=version_key,
        namespace=namespace,
    )
    _echo(f"wrote {count} rows of {table} to {out}")
    click.echo(out)


@main.command()
@click.argument("key")
def verify(key: str) -> None:
    """Check every file a version (DATASET@vN, with its shard sets) or a shard set stands on.

    Exits 1 naming each bad file: landed files, Iceberg metadata and data files, shard-set
    manifests and MDS shards, each against the checksum or count that pins it.
    """
    from fm_assets.checks.integrity import verify as verify_key

    result = verify_key(load_settings(), key)
    for kind, count in sorted(result.checked.items()):
        click.echo(f"{kind}: {count} checked")
    for bad in result.bad:
        click.echo(f"BAD {bad.location}: {bad.problem}")
    if not result.ok:
        _echo(f"{key}: {len(result.bad)} bad file(s); do not read it until they are restored")
        sys.exit(1)
    _echo(f"{key}: every file verified")


@main.command()
@click.argument("doc_id")
def explain(doc_id: str) -> None:
    """Every stage's decision on one document, with the scores and thresholds behind it."""
    from fm_assets.commands.explain import explain_document

    for line in explain_document(load_settings(), doc_id):
        click.echo(line)


@main.command()
def status() -> None:
    """Batches, versions, shard sets and failing checks."""
    from fm_assets.commands.status import render_status

    click.echo(render_status(load_settings()))


@main.command()
@click.argument("inputs", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--tokenizer", "tokenizer_path", default=None, help="tokenizer.json (default: train one)."
)
@click.option("--seq-len", default=2048, show_default=True)
@click.option("--dataset", default="demo", show_default=True)
@click.option("--source", default="demo", show_default=True, help="Source name for INPUTS.")
@click.option("--license", "license_", default="CC0-1.0", show_default=True)
def demo(
    inputs: tuple[str, ...],
    tokenizer_path: str | None,
    seq_len: int,
    dataset: str,
    source: str,
    license_: str,
) -> None:
    """The main job: land INPUTS (default: a generated sample), curate, shard, read back."""
    from fm_assets.commands.demo import run_demo

    key = run_demo(
        load_settings(),
        [Path(p) for p in inputs],
        Path(tokenizer_path) if tokenizer_path else None,
        seq_len,
        dataset,
        log=_echo,
        source=source,
        license=license_,
    )
    click.echo(key)


main.add_command(classifier)
main.add_command(dev)
main.add_command(lineage)
main.add_command(revoke)
main.add_command(approve)
main.add_command(cache)
main.add_command(loader)
main.add_command(text)
main.add_command(backup)
main.add_command(metrics)
main.add_command(maintain)
main.add_command(purge)
main.add_command(gc)
main.add_command(ray_group)
main.add_command(cost)


if __name__ == "__main__":
    main()
