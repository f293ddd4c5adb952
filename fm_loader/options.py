"""What a trainer asks of `make_dataset`, validated once and passed down to every layer.

    make_dataset("web@v3", rank=r, world_size=w, seed=0, seq_len=2048)     # keywords, or
    make_dataset("web@v3", LoaderOptions(rank=r, world_size=w, seed=0, seq_len=2048))

`LoaderOptions` is the one place that names the options, their defaults and what makes a value
valid; `LoaderKeywords` types the same names as keywords of `make_dataset` (a test keeps the two
equal). The sources read the checks and the access they ask for (seq_len, tokenizer, expected
hashes, settings, cache_dir, revocation, namespaces); the datasets the stream they ask for
(rank, world size, seed, epoch, shuffle window, batch size, pack groups).
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypedDict

from fm_loader.settings import CatalogLocation

DEFAULT_SHUFFLE_WINDOW = 1 << 16  # samples: spans several 64 MB shards at seq_len 2048
DEFAULT_DOCS_PER_PACK = 64  # documents tokenized and packed together (tokenize_online=True)


@dataclass(frozen=True, kw_only=True)
class LoaderOptions:
    """Every option of `make_dataset`; see its docstring for what each one does."""

    rank: int | None = None  # None: torch.distributed, then RANK, else 0
    world_size: int | None = None  # None: torch.distributed, then WORLD_SIZE, else 1
    seed: int = 0
    epoch: int = 0
    seq_len: int | None = None
    tokenizer: str | Path | None = None  # a tokenizer.json path
    shuffle_window: int = DEFAULT_SHUFFLE_WINDOW
    batch_size: int | None = None  # None: not chosen (make_loader chooses)
    expected_tokenizer_hash: str | None = None
    expected_schema_fingerprint: str | None = None
    settings: CatalogLocation | None = None  # None: from the environment (FM_HOME, ...)
    cache_dir: str | Path | None = None  # None: $FM_LOADER_CACHE_DIR, else ~/.cache/fm_loader
    run_id: str | None = None
    allow_revoked: bool = False
    namespaces: Collection[str] | None = None
    tokenize_online: bool = False
    docs_per_pack: int = DEFAULT_DOCS_PER_PACK
    image_size: int | None = None  # image-text: decode images to this longer side (None: bytes)

    def __post_init__(self) -> None:
        chosen_badly = self.batch_size is not None and self.batch_size < 1
        if self.seed < 0 or self.epoch < 0 or self.shuffle_window < 1 or chosen_badly:
            raise ValueError(
                "seed and epoch must be non-negative and shuffle_window and batch_size positive, "
                f"got seed={self.seed}, epoch={self.epoch}, shuffle_window={self.shuffle_window}, "
                f"batch_size={self.batch_size}"
            )
        if self.docs_per_pack < 1:
            raise ValueError(f"docs_per_pack must be positive, got {self.docs_per_pack}")
        if self.image_size is not None and self.image_size < 8:
            raise ValueError(f"image_size must be at least 8 pixels, got {self.image_size}")
        if self.tokenize_online and (self.tokenizer is None or self.seq_len is None):
            raise ValueError(
                "make_dataset(tokenize_online=True) needs the tokenizer (tokenizer=PATH to a "
                "tokenizer.json) and seq_len=N to pack into"
            )
        if self.tokenize_online and self.seq_len is not None and self.seq_len < 2:
            raise ValueError(f"seq_len must be at least 2 to pack into, got {self.seq_len}")
        # Normalized once: a path for the cache, a set of namespaces.
        if self.cache_dir is not None:
            object.__setattr__(self, "cache_dir", Path(self.cache_dir))
        if self.namespaces is not None:
            object.__setattr__(self, "namespaces", frozenset(self.namespaces))

    @property
    def cache_path(self) -> Path | None:
        return None if self.cache_dir is None else Path(self.cache_dir)

    def placement(self) -> tuple[int, int]:
        """(rank, world_size): as given, else torch.distributed, else RANK/WORLD_SIZE, else 0/1."""
        rank, world_size = self.rank, self.world_size
        if rank is None or world_size is None:
            env_rank, env_world = _world_from_environment()
            rank = env_rank if rank is None else rank
            world_size = env_world if world_size is None else world_size
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(
                f"invalid placement rank={rank}, world_size={world_size}: need 0 <= rank < "
                "world_size; pass rank= and world_size= explicitly or set RANK and WORLD_SIZE"
            )
        return rank, world_size


class LoaderKeywords(TypedDict, total=False):
    """`LoaderOptions`' fields as keywords of `make_dataset`, typed for the trainer's checker."""

    rank: int | None
    world_size: int | None
    seed: int
    epoch: int
    seq_len: int | None
    tokenizer: str | Path | None
    shuffle_window: int
    batch_size: int | None
    expected_tokenizer_hash: str | None
    expected_schema_fingerprint: str | None
    settings: CatalogLocation | None
    cache_dir: str | Path | None
    run_id: str | None
    allow_revoked: bool
    namespaces: Collection[str] | None
    tokenize_online: bool
    docs_per_pack: int
    image_size: int | None


def option_names() -> tuple[str, ...]:
    """The names `LoaderOptions` takes, in order."""
    return tuple(f.name for f in fields(LoaderOptions))


def with_keywords(options: LoaderOptions | None, keywords: dict[str, Any]) -> LoaderOptions:
    """`options` (default: all defaults) with `keywords` replacing fields; an unknown keyword
    raises TypeError naming the known ones."""
    unknown = sorted(set(keywords) - set(option_names()))
    if unknown:
        raise TypeError(
            f"make_dataset() got unknown keyword(s) {unknown}; it takes {list(option_names())}"
        )
    base = options if options is not None else LoaderOptions()
    values = {f.name: getattr(base, f.name) for f in fields(LoaderOptions)}
    return LoaderOptions(**{**values, **keywords})


def _world_from_environment() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError as exc:
        raise ValueError(f"RANK/WORLD_SIZE must be integers: {exc}") from exc
