"""fm_loader: serve packed MDS shard sets to trainers, deterministically, elastically and checked.

    from fm_loader import make_dataset, make_loader
    dataset = make_dataset({"web@v3": 0.7, "code@v1": 0.3}, seq_len=2048, rank=r, world_size=w)
    loader = make_loader(dataset, batch_size=8, num_workers=2)
    for batch in loader: ...
    state = loader.state_dict()          # load into a job of any world size / worker count

Imports nothing of the platform (fm_assets), dagster or ray: trainers install only
`fm-platform[loader]`. The public names load on first use, so importing a light submodule
(`fm_loader.settings`, `fm_loader.manifest`) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fm_loader.collation import collate
    from fm_loader.dataset import FmDataset
    from fm_loader.loader import FmLoader, make_loader
    from fm_loader.make import make_dataset
    from fm_loader.manifest import (
        MANIFEST_FORMAT_VERSION,
        ShardInfo,
        ShardSetManifest,
        mds_columns,
        read_manifest,
        schema_fingerprint,
    )
    from fm_loader.metrics import LoaderMetrics
    from fm_loader.mixture import Epochs, MixtureSpec
    from fm_loader.online import OnlineDataset
    from fm_loader.online_state import merge_states
    from fm_loader.samples import IGNORE_INDEX
    from fm_loader.stall import ProbeReport, probe
    from fm_loader.state import LoaderState
    from fm_loader.warmup import prewarm

# Public name -> the module defining it.
_PUBLIC = {
    "IGNORE_INDEX": "fm_loader.samples",
    "MANIFEST_FORMAT_VERSION": "fm_loader.manifest",
    "Epochs": "fm_loader.mixture",
    "FmDataset": "fm_loader.dataset",
    "FmLoader": "fm_loader.loader",
    "LoaderMetrics": "fm_loader.metrics",
    "LoaderState": "fm_loader.state",
    "MixtureSpec": "fm_loader.mixture",
    "ShardInfo": "fm_loader.manifest",
    "ShardSetManifest": "fm_loader.manifest",
    "collate": "fm_loader.collation",
    "make_dataset": "fm_loader.make",
    "make_loader": "fm_loader.loader",
    "prewarm": "fm_loader.warmup",
    "merge_states": "fm_loader.online_state",
    "OnlineDataset": "fm_loader.online",
    "probe": "fm_loader.stall",
    "ProbeReport": "fm_loader.stall",
    "mds_columns": "fm_loader.manifest",
    "read_manifest": "fm_loader.manifest",
    "schema_fingerprint": "fm_loader.manifest",
}

__all__ = [
    "IGNORE_INDEX",
    "MANIFEST_FORMAT_VERSION",
    "Epochs",
    "FmDataset",
    "FmLoader",
    "LoaderMetrics",
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
