"""`fm cache`: the node's hot cache of shard sets (pre-warm, status, pins, quota); `fm text`.

`fm cache prewarm` materializes the `shard_set_cache` asset of each shard set (so the pre-warm
shows in the Dagster UI and a run's launch can depend on it); the other subcommands read and
change the cache directory itself (`fm_loader.storage.cache_dir`). Platform modules are
imported inside each command: `fm --help` must stay fast.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import click

from fm_assets.settings import load_settings

_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
CACHE_DIR = click.option(
    "--cache-dir",
    default=None,
    type=click.Path(file_okay=False),
    help="The node's cache directory (default: $FM_LOADER_CACHE_DIR, else ~/.cache/fm_loader).",
)


def _echo(message: str) -> None:
    click.echo(f"[fm {dt.datetime.now():%H:%M:%S}] {message}", err=True)


def _root(cache_dir: str | None) -> Path:
    from fm_loader.storage.cache_dir import default_cache_dir

    return Path(cache_dir) if cache_dir else default_cache_dir()


def parse_size(text: str) -> int:
    """Bytes from "500G", "1.5T", "2048MiB" or a plain number (binary units)."""
    match = _SIZE.match(text)
    if not match:
        raise click.BadParameter(f"{text!r} is not a size; write e.g. 500G, 1.5T or 2048MiB")
    return int(float(match[1]) * _UNITS[match[2].upper()])


@click.group()
def cache() -> None:
    """The node's hot cache of shard sets (pre-warm before a run, status, pins, quota)."""


@cache.command()
@click.argument("key")
@CACHE_DIR
@click.option("--seq-len", type=int, default=None, help="Only the version's sets of this seq_len.")
@click.option("--tokenizer", default=None, help="Only the version's sets of this tokenizer.json.")
def prewarm(key: str, cache_dir: str | None, seq_len: int | None, tokenizer: str | None) -> None:
    """Download and verify every shard of KEY into the cache; prints each shard set key last.

    KEY: a version (DATASET@vN: each of its shard sets), a shard set (DATASET@vN/CONFIG) or an
    s3:// URI.
    """
    from fm_assets.defs.materialize import add_partitions, materialize, shard_set_partition
    from fm_assets.defs.partitions import dataset_versions, shard_configs
    from fm_loader.sources.catalog import SHARD_SET_KEY, shard_set_locations
    from fm_loader.sources.resolve import tokenizer_file_hash
    from fm_loader.sources.warmup import warm

    settings = load_settings()
    root = _root(cache_dir)
    locations = shard_set_locations(
        key,
        seq_len=seq_len,
        tokenizer_hash=tokenizer_file_hash(tokenizer) if tokenizer else None,
        settings=settings,
    )
    for location in locations:
        registered = SHARD_SET_KEY.fullmatch(location.shard_set_key)
        if registered and location.uri != key:
            version, config = location.shard_set_key.split("/")
            add_partitions(settings, dataset_versions, [version])
            add_partitions(settings, shard_configs, [config])
            run_config = {"ops": {"shard_set_cache": {"config": {"cache_dir": str(root)}}}}
            materialize(
                settings,
                ["shard_set_cache"],
                shard_set_partition(version, config),
                _echo,
                run_config=run_config,
            )
        else:  # named by its location: no asset partition to record it under
            report = warm(location, root, settings.s3_endpoint)
            _echo(
                f"{location.shard_set_key}: {report.bytes_total / 1e6:,.1f} MB warm in "
                f"{report.seconds:.1f} s ({report.fetched_bytes / 1e6:,.1f} MB fetched)"
            )
        click.echo(location.shard_set_key)


@cache.command()
@CACHE_DIR
def status(cache_dir: str | None) -> None:
    """Per cached shard set: how much is warm, its bytes, its last use, pins and readers."""
    from fm_loader.storage.cache_dir import cache_status, read_config

    root = _root(cache_dir)
    entries = cache_status(root)
    quota = read_config(root).quota_bytes if root.is_dir() else None
    used = sum(e.bytes_present for e in entries)
    click.echo(
        f"{root}: {len(entries)} sets, {used / 1e6:,.1f} MB"
        + (f" of a {quota / 1e6:,.1f} MB quota" if quota else " (no quota)")
    )
    click.echo("shard set\twarm\tshards\tMB\tlast use (UTC)\tpinned\topen\tentry")
    for e in entries:
        share = e.bytes_present / e.bytes_total if e.bytes_total else 1.0
        warm = "100%" if e.complete else f"{share:.0%} (incomplete)"
        click.echo(
            f"{e.shard_set_key or '?'}\t{warm}\t{e.shards_present}/{e.shards_total}\t"
            f"{e.bytes_present / 1e6:,.1f}/{e.bytes_total / 1e6:,.1f}\t"
            f"{e.last_use:%Y-%m-%d %H:%M:%S}\t{e.pinned_by or '-'}\t"
            f"{'yes' if e.in_use else 'no'}\t{e.manifest_sha256[:12]}"
        )


def _digests(key: str) -> list[tuple[str, str]]:
    """(shard set key, manifest sha256) of every set KEY names."""
    from fm_loader.sources.catalog import shard_set_locations

    return [
        (loc.shard_set_key, loc.manifest_sha256)
        for loc in shard_set_locations(key, settings=load_settings())
    ]


@cache.command()
@click.argument("key")
@CACHE_DIR
@click.option("--by", "holder", default="manual", show_default=True, help="Who holds it: a run.")
def pin(key: str, cache_dir: str | None, holder: str) -> None:
    """Keep KEY's shard sets out of eviction (for a run's lifetime) until `fm cache unpin`."""
    from fm_loader.storage.cache_dir import pin as pin_set

    for shard_set, digest in _digests(key):
        pin_set(_root(cache_dir), digest, shard_set, holder)
        _echo(f"pinned {shard_set} ({digest[:12]}) for {holder}")
        click.echo(shard_set)


@cache.command()
@click.argument("key")
@CACHE_DIR
def unpin(key: str, cache_dir: str | None) -> None:
    """Let KEY's shard sets be evicted again (least recently used first)."""
    from fm_loader.storage.cache_dir import unpin as unpin_set

    for shard_set, digest in _digests(key):
        released = unpin_set(_root(cache_dir), digest)
        _echo(f"{'unpinned' if released else 'was not pinned:'} {shard_set} ({digest[:12]})")
        click.echo(shard_set)


@cache.command()
@click.argument("size")
@CACHE_DIR
def quota(size: str, cache_dir: str | None) -> None:
    """Cap the cache at SIZE (500G, 1.5T; "none" lifts the cap), enforced at the next download."""
    from fm_loader.storage.cache_dir import set_quota

    limit = None if size.lower() == "none" else parse_size(size)
    set_quota(_root(cache_dir), limit)
    _echo(f"{_root(cache_dir)}: quota {'none' if limit is None else f'{limit:,} bytes'}")


@click.group()
def text() -> None:
    """Text sets: a version's curated text, for tokenizing in the loader."""


@text.command("export")
@click.argument("version_key")
def text_export(version_key: str) -> None:
    """Export VERSION_KEY's curated text as a text set; prints the version key last.

    Trainers then read it with make_dataset(VERSION_KEY, tokenizer=PATH, seq_len=N,
    tokenize_online=True).
    """
    from fm_assets.defs.materialize import add_partitions, materialize
    from fm_assets.defs.partitions import dataset_versions
    from fm_assets.versions.dataset_version import require_version

    settings = load_settings()
    require_version(settings, version_key)  # before Dagster is even imported
    add_partitions(settings, dataset_versions, [version_key])
    materialize(settings, ["text_set"], version_key, _echo)
    click.echo(version_key)
