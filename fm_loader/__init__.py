"""fm_loader: serve packed MDS shard sets to trainers, deterministically and checked.

    from fm_loader import make_dataset, collate
    dataset = make_dataset("web@v1", seq_len=2048, tokenizer="tokenizer.json", seed=0)
    loader = torch.utils.data.DataLoader(dataset, batch_size=8, collate_fn=collate)

Imports neither dagster, ray nor the fm_assets stages: trainers install only `fm-platform[loader]`.
"""

from fm_loader.collate import collate
from fm_loader.dataset import ShardSetDataset, make_dataset
from fm_loader.manifest import (
    MANIFEST_FORMAT_VERSION,
    ShardInfo,
    ShardSetManifest,
    mds_columns,
    read_manifest,
    schema_fingerprint,
)
from fm_loader.samples import IGNORE_INDEX
from fm_loader.state import LoaderState

__all__ = [
    "IGNORE_INDEX",
    "MANIFEST_FORMAT_VERSION",
    "LoaderState",
    "ShardInfo",
    "ShardSetDataset",
    "ShardSetManifest",
    "collate",
    "make_dataset",
    "mds_columns",
    "read_manifest",
    "schema_fingerprint",
]
