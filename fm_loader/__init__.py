"""fm_loader: serve packed MDS shard sets to trainers, deterministically, elastically and checked.

    from fm_loader import make_dataset, make_loader
    dataset = make_dataset({"web@v3": 0.7, "code@v1": 0.3}, seq_len=2048, rank=r, world_size=w)
    loader = make_loader(dataset, batch_size=8, num_workers=2)
    for batch in loader: ...
    state = loader.state_dict()          # load into a job of any world size / worker count

Imports nothing of the platform (fm_assets), dagster or ray: trainers install only
`fm-platform[loader]`. The public names load on first use, so importing a light submodule
(`fm_loader.settings`, `fm_loader.format.manifest`) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fm_loader.format.manifest import (
        MANIFEST_FORMAT_VERSION,
        ShardInfo,
        ShardSetManifest,
        mds_columns,
        read_manifest,
        schema_fingerprint,
    )
    from fm_loader.make import make_dataset
    from fm_loader.options import LoaderOptions
    from fm_loader.order.mixture import Epochs, MixtureSpec
    from fm_loader.order.pack_state import merge_states
    from fm_loader.order.state import LoaderState
    from fm_loader.samples.token_blocks import IGNORE_INDEX
    from fm_loader.samples.tokens import collate
    from fm_loader.serving.dataset import FmDataset
    from fm_loader.serving.loader import FmLoader, make_loader
    from fm_loader.serving.metrics import LoaderMetrics
    from fm_loader.serving.online import OnlineDataset
    from fm_loader.serving.stall import ProbeReport, probe
    from fm_loader.sources.warmup import prewarm

# Public name -> the module defining it.
_PUBLIC = {
    "IGNORE_INDEX": "fm_loader.samples.token_blocks",
    "MANIFEST_FORMAT_VERSION": "fm_loader.format.manifest",
    "Epochs": "fm_loader.order.mixture",
    "FmDataset": "fm_loader.serving.dataset",
    "FmLoader": "fm_loader.serving.loader",
    "LoaderMetrics": "fm_loader.serving.metrics",
    "LoaderOptions": "fm_loader.options",
    "LoaderState": "fm_loader.order.state",
    "MixtureSpec": "fm_loader.order.mixture",
    "OnlineDataset": "fm_loader.serving.online",
    "ProbeReport": "fm_loader.serving.stall",
    "ShardInfo": "fm_loader.format.manifest",
    "ShardSetManifest": "fm_loader.format.manifest",
    "collate": "fm_loader.samples.tokens",
    "make_dataset": "fm_loader.make",
    "make_loader": "fm_loader.serving.loader",
    "mds_columns": "fm_loader.format.manifest",
    "merge_states": "fm_loader.order.pack_state",
    "prewarm": "fm_loader.sources.warmup",
    "probe": "fm_loader.serving.stall",
    "read_manifest": "fm_loader.format.manifest",
    "schema_fingerprint": "fm_loader.format.manifest",
}

__all__ = [
    "IGNORE_INDEX",
    "MANIFEST_FORMAT_VERSION",
    "Epochs",
    "FmDataset",
    "FmLoader",
    "LoaderMetrics",
    "LoaderOptions",
    "LoaderState",
    "MixtureSpec",
    "OnlineDataset",
    "ProbeReport",
    "ShardInfo",
    "ShardSetManifest",
    "collate",
    "make_dataset",
    "make_loader",
    "mds_columns",
    "merge_states",
    "prewarm",
    "probe",
    "read_manifest",
    "schema_fingerprint",
]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'fm_loader' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value
