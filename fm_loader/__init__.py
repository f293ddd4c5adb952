"""fm_loader: serve packed MDS shard sets to trainers, deterministically, elastically and checked.

    from fm_loader import make_dataset, make_loader
    dataset = make_dataset({"web@v3": 0.7, "code@v1": 0.3}, seq_len=2048, rank=r, world_size=w)
    loader = make_loader(dataset, batch_size=8, num_workers=2)
    for batch in loader: ...
    state = loader.state_dict()          # load into a job of any world size / worker count

Imports nothing of the platform (fm_assets), dagster or ray: trainers install only
`fm-platform[loader]`.
"""

from fm_loader.collate import collate
from fm_loader.dataset import FmDataset, make_dataset
from fm_loader.loader import FmLoader, make_loader
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
from fm_loader.samples import IGNORE_INDEX
from fm_loader.state import LoaderState

__all__ = [
    "IGNORE_INDEX",
    "MANIFEST_FORMAT_VERSION",
    "Epochs",
    "FmDataset",
    "FmLoader",
    "LoaderMetrics",
    "LoaderState",
    "MixtureSpec",
    "ShardInfo",
    "ShardSetManifest",
    "collate",
    "make_dataset",
    "make_loader",
    "mds_columns",
    "read_manifest",
    "schema_fingerprint",
]
