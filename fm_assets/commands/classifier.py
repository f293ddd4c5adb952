"""`fm classifier`: train a fastText quality classifier and register it by hash.

Platform modules are imported inside the command: `fm --help` must stay fast.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import click

from fm_assets.settings import load_settings


def _echo(message: str) -> None:
    click.echo(f"[fm {dt.datetime.now():%H:%M:%S}] {message}", err=True)


@click.group()
def classifier() -> None:
    """Quality classifiers (fastText, DCLM-style)."""


@classifier.command("train")
@click.option(
    "--positive", "positives", multiple=True, type=click.Path(exists=True, dir_okay=False)
)
@click.option(
    "--negative", "negatives", multiple=True, type=click.Path(exists=True, dir_okay=False)
)
@click.option(
    "--default-recipe",
    is_flag=True,
    help="Article bodies vs page boilerplate from the shared extraction benchmark.",
)
@click.option(
    "--data-dir",
    default=None,
    type=click.Path(file_okay=False),
    help="The shared data directory the default recipe reads (default: FM_SHARED_DATA, "
    "../shared/data).",
)
@click.option(
    "--default",
    "make_default",
    is_flag=True,
    help="Make it the default classifier (implied by --default-recipe).",
)
def classifier_train(
    positives: tuple[str, ...],
    negatives: tuple[str, ...],
    default_recipe: bool,
    data_dir: str | None,
    make_default: bool,
) -> None:
    """Train and register a quality classifier; prints its model sha256 last.

    --positive/--negative: .jsonl(.gz) files (one document per line, field "text") or text
    files (one document each). Or --default-recipe, whose model becomes the default classifier
    (the one the default web policy scores with).
    """
    from fm_assets.commands.operations import train_classifier
    from fm_assets.commands.training_text import read_documents

    if default_recipe == bool(positives or negatives):
        raise click.UsageError("give either --default-recipe or --positive and --negative files")
    pos: list[Any]
    neg: list[Any]
    if default_recipe:
        from fm_assets.curation.classifier.recipe import default_training_data

        settings = load_settings()
        pos, neg, sources = default_training_data(
            Path(data_dir) if data_dir else settings.shared_data
        )
    else:
        if not positives or not negatives:
            raise click.UsageError("give at least one --positive and one --negative file")
        pos, neg = read_documents(positives), read_documents(negatives)
        sources = {"positive": ", ".join(positives), "negative": ", ".join(negatives)}
    digest = train_classifier(
        load_settings(),
        list(pos),
        list(neg),
        sources,
        _echo,
        make_default=make_default or default_recipe,
    )
    click.echo(digest)
