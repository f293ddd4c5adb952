"""`make_dataset`: the trainer's one entry point: resolve, check, and open a set or a mixture."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Literal, overload

from fm_loader.format.text_set import resolve_text_set
from fm_loader.order.mixture import MixtureArg, MixtureSpec
from fm_loader.order.plan import resolve_world
from fm_loader.samples.packing import OnlineTokenizer
from fm_loader.serving.dataset import DEFAULT_SHUFFLE_WINDOW, FmDataset
from fm_loader.serving.online import DEFAULT_DOCS_PER_PACK, OnlineDataset
from fm_loader.settings import CatalogLocation
from fm_loader.sources.provenance import refuse_namespaces, refuse_revoked
from fm_loader.sources.resolve import (
    check_compatible,
    location_of,
    resolve_shard_set,
    tokenizer_file_hash,
)


@overload
def make_dataset(
    source: MixtureArg,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    seed: int = 0,
    epoch: int = 0,
    seq_len: int | None = None,
    tokenizer: str | None = None,
    shuffle_window: int = DEFAULT_SHUFFLE_WINDOW,
    batch_size: int | None = None,
    expected_tokenizer_hash: str | None = None,
    expected_schema_fingerprint: str | None = None,
    settings: CatalogLocation | None = None,
    cache_dir: str | Path | None = None,
    run_id: str | None = None,
    allow_revoked: bool = False,
    namespaces: Collection[str] | None = None,
    tokenize_online: Literal[False] = False,
    docs_per_pack: int = DEFAULT_DOCS_PER_PACK,
) -> FmDataset: ...


@overload
def make_dataset(
    source: MixtureArg,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    seed: int = 0,
    epoch: int = 0,
    seq_len: int | None = None,
    tokenizer: str | None = None,
    shuffle_window: int = DEFAULT_SHUFFLE_WINDOW,
    batch_size: int | None = None,
    expected_tokenizer_hash: str | None = None,
    expected_schema_fingerprint: str | None = None,
    settings: CatalogLocation | None = None,
    cache_dir: str | Path | None = None,
    run_id: str | None = None,
    allow_revoked: bool = False,
    namespaces: Collection[str] | None = None,
    tokenize_online: Literal[True],
    docs_per_pack: int = DEFAULT_DOCS_PER_PACK,
) -> OnlineDataset: ...


@overload
def make_dataset(
    source: MixtureArg,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    seed: int = 0,
    epoch: int = 0,
    seq_len: int | None = None,
    tokenizer: str | None = None,
    shuffle_window: int = DEFAULT_SHUFFLE_WINDOW,
    batch_size: int | None = None,
    expected_tokenizer_hash: str | None = None,
    expected_schema_fingerprint: str | None = None,
    settings: CatalogLocation | None = None,
    cache_dir: str | Path | None = None,
    run_id: str | None = None,
    allow_revoked: bool = False,
    namespaces: Collection[str] | None = None,
    tokenize_online: bool,
    docs_per_pack: int = DEFAULT_DOCS_PER_PACK,
) -> FmDataset | OnlineDataset: ...


def make_dataset(
    source: MixtureArg,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    seed: int = 0,
    epoch: int = 0,
    seq_len: int | None = None,
    tokenizer: str | None = None,
    shuffle_window: int = DEFAULT_SHUFFLE_WINDOW,
    batch_size: int | None = None,
    expected_tokenizer_hash: str | None = None,
    expected_schema_fingerprint: str | None = None,
    settings: CatalogLocation | None = None,
    cache_dir: str | Path | None = None,
    run_id: str | None = None,
    allow_revoked: bool = False,
    namespaces: Collection[str] | None = None,
    tokenize_online: bool = False,
    docs_per_pack: int = DEFAULT_DOCS_PER_PACK,
) -> FmDataset | OnlineDataset:
    """Open a shard set, or a mixture of them, for training and check it before the first step.

    `source`: a dataset version key ("web@v1", resolved through the `shard_sets` catalog table),
    a shard-set directory / file:// / s3:// URI, or a mixture mapping such keys to weights
    ({"web@v3": 0.7, "code@v1": 0.3}) or to `Epochs(k)`. `seq_len` and `tokenizer` (a
    tokenizer.json path) choose among a version's shard sets and must match the one served.
    `rank`/`world_size` default to torch.distributed, then RANK/WORLD_SIZE. `batch_size` decides
    which worker serves which sample (workers take whole batches in turn, so the trainer receives
    the rank's stream in order): with a plain DataLoader pass its `batch_size` here; with
    `make_loader` give it here or there, once. None (the default) means not chosen: `make_loader`
    then sets its own, and the dataset iterated alone places samples one by one.

    Remote sets are downloaded once per node into `cache_dir` (default `~/.cache/fm_loader`), in
    a directory named by their manifest's sha256. Raises ValueError, saying what to do, on an
    unknown or ambiguous version, a tokenizer or schema mismatch, an unknown manifest format, a
    remote set that fails its checksums, or sources that cannot be mixed.

    A shard set the platform revoked (`fm revoke`) raises, naming the reason and its replacement,
    unless `allow_revoked=True` (audits). `run_id` names the training run: rank 0 records it beside
    each shard set, with the position consumed at every `state_dict()`, for `fm lineage run`.
    `namespaces` (e.g. {"cloud"}): the data namespaces this job may read; a source holding any
    other raises, naming it.

    `tokenize_online=True` (fine-tunes whose tokenizer is the experiment): serve each version's
    curated text (its text set, `fm text export DATASET@vN`) tokenized here with `tokenizer`
    and packed on the fly into `seq_len` samples, `docs_per_pack` documents at a time; see
    `fm_loader.serving.online`. The same exactly-once, elastic, resumable contract, with a
    state that pins the tokenizer's hash.
    """
    spec = MixtureSpec.parse(source)
    rank, world_size = resolve_world(rank, world_size)
    if tokenize_online:
        return _online(
            spec,
            rank=rank,
            world_size=world_size,
            seed=seed,
            epoch=epoch,
            seq_len=seq_len,
            tokenizer=tokenizer,
            shuffle_window=shuffle_window,
            batch_size=batch_size,
            settings=settings,
            cache_dir=Path(cache_dir) if cache_dir is not None else None,
            allow_revoked=allow_revoked,
            namespaces=namespaces,
            docs_per_pack=docs_per_pack,
        )
    tokenizer_hash = tokenizer_file_hash(tokenizer) if tokenizer is not None else None
    resolved = []
    for key in spec.keys:
        one = resolve_shard_set(
            key,
            seq_len=seq_len,
            tokenizer_hash=tokenizer_hash or expected_tokenizer_hash,
            settings=settings,
            cache_dir=Path(cache_dir) if cache_dir is not None else None,
        )
        check_compatible(
            one.manifest,
            seq_len=seq_len,
            tokenizer_hash=tokenizer_hash,
            expected_tokenizer_hash=expected_tokenizer_hash,
            expected_schema_fingerprint=expected_schema_fingerprint,
        )
        location, endpoint = location_of(one)
        if not allow_revoked:
            refuse_revoked(key, one.manifest.shard_set_key, location, endpoint)
        if namespaces is not None:
            refuse_namespaces(key, location, namespaces, endpoint)
        resolved.append(one)
    dataset = FmDataset(
        resolved,
        spec,
        rank=rank,
        world_size=world_size,
        seed=seed,
        epoch=epoch,
        shuffle_window=shuffle_window,
        batch_size=batch_size,
    )
    if run_id is not None:
        dataset.record_run(run_id)
    return dataset


def _online(
    spec: MixtureSpec,
    *,
    rank: int,
    world_size: int,
    seed: int,
    epoch: int,
    seq_len: int | None,
    tokenizer: str | None,
    shuffle_window: int,
    batch_size: int | None,
    settings: CatalogLocation | None,
    cache_dir: Path | None,
    allow_revoked: bool,
    namespaces: Collection[str] | None,
    docs_per_pack: int,
) -> OnlineDataset:
    if tokenizer is None or seq_len is None:
        raise ValueError(
            "make_dataset(tokenize_online=True) needs the tokenizer (tokenizer=PATH to a "
            "tokenizer.json) and seq_len=N to pack into"
        )
    texts = []
    for key in spec.keys:
        text = resolve_text_set(key, settings=settings, cache_dir=cache_dir)
        endpoint = settings.s3_endpoint if settings is not None else None
        where = text.remote.uri if text.remote is not None else str(text.directory)
        if not allow_revoked:
            refuse_revoked(key, text.manifest.text_set_key, where, endpoint)
        if namespaces is not None:
            refuse_namespaces(key, where, namespaces, endpoint)
        texts.append(text)
    return OnlineDataset(
        texts,
        spec,
        OnlineTokenizer.from_file(tokenizer),
        rank=rank,
        world_size=world_size,
        seq_len=seq_len,
        seed=seed,
        epoch=epoch,
        shuffle_window=shuffle_window,
        batch_size=batch_size,
        docs_per_pack=docs_per_pack,
    )
