"""`fm loader probe`: the stall diagnostic on a shard set or mixture, from the command line.

Opens the source as a trainer would (`fm_loader.make_dataset`), runs `fm_loader.probe` with a
step that stands for the accelerator's time, and prints both loops side by side and the verdict.
"""

from __future__ import annotations

import click


@click.group()
def loader() -> None:
    """The trainer-side loader (fm_loader)."""


@loader.command()
@click.argument("source")
@click.option("--batch-size", default=8, show_default=True)
@click.option("--num-workers", default=2, show_default=True)
@click.option("--steps", default=200, show_default=True, help="Steps timed in each loop.")
@click.option(
    "--step-ms",
    default=50.0,
    show_default=True,
    help="The trainer's step: the accelerator's time per batch (the host idles meanwhile).",
)
@click.option("--seq-len", type=int, default=None)
@click.option("--tokenizer", default=None, help="tokenizer.json the shard set must match.")
@click.option("--cache-dir", default=None, type=click.Path(file_okay=False))
def probe(
    source: str,
    batch_size: int,
    num_workers: int,
    steps: int,
    step_ms: float,
    seq_len: int | None,
    tokenizer: str | None,
    cache_dir: str | None,
) -> None:
    """Time a trainer-shaped loop on SOURCE (a version key, shard set directory or URI) with the
    real loader and with data for free; print step time, stall fraction, tokens/s and which side
    is the bottleneck."""
    from fm_assets.settings import load_settings
    from fm_loader import make_dataset
    from fm_loader import probe as run_probe

    dataset = make_dataset(
        source,
        rank=0,
        world_size=1,
        seq_len=seq_len,
        tokenizer=tokenizer,
        settings=load_settings(),
        cache_dir=cache_dir,
    )
    report = run_probe(
        dataset,
        step=step_ms / 1e3,
        steps=steps,
        batch_size=batch_size,
        num_workers=num_workers,
    )
    click.echo(
        f"{source}: batch_size {report.batch_size}, {report.num_workers} workers, "
        f"{steps} steps of {step_ms:g} ms"
    )
    click.echo("figure\treal loader\tdata from memory")
    for name, real, synthetic in report.rows():
        click.echo(f"{name}\t{real}\t{synthetic}")
    click.echo(f"bottleneck: {report.bottleneck}")
    click.echo(report.verdict())
