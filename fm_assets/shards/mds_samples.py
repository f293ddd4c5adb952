"""Reading the samples of one MDS shard back as column bytes, and writing a shard with the same
configuration: what a purge needs to rewrite a shard without some samples or segments.

The layout is the one `shards.mds` writes (MDS version 2, uncompressed): a uint32 sample count,
count + 1 uint32 offsets, the writer's configuration as JSON, then each sample: a uint32 size
for each variable-size column, then every column's bytes, in column order.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fm_assets.shards.mds import MDSShardWriter

Sample = dict[str, bytes]


@dataclass(frozen=True)
class Shard:
    """One shard's configuration (as written) and its samples."""

    config: dict[str, Any]
    samples: list[Sample]


def read_shard(data: bytes, where: str) -> Shard:
    """The samples of a shard's bytes, each as {column: bytes}."""
    count = int(np.frombuffer(data, np.uint32, count=1)[0])
    offsets = np.frombuffer(data, np.uint32, count=count + 1, offset=4).astype(np.int64)
    config = json.loads(data[4 * (count + 2) : int(offsets[0])])
    if config.get("compression") or config.get("format") != "mds":
        raise ValueError(f"{where} is not an uncompressed MDS shard ({config.get('compression')})")
    names, sizes = config["column_names"], config["column_sizes"]
    variable = [i for i, size in enumerate(sizes) if size is None]
    samples = []
    for begin, end in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
        lengths = np.frombuffer(data, np.uint32, count=len(variable), offset=begin).tolist()
        at = begin + 4 * len(variable)
        sample: Sample = {}
        lengths_of = dict(zip(variable, lengths, strict=True))
        for i, name in enumerate(names):
            size = sizes[i] if sizes[i] is not None else lengths_of[i]
            sample[name] = data[at : at + size]
            at += size
        if at != end:
            raise ValueError(f"{where}: a sample's columns do not fill its {end - begin} bytes")
        samples.append(sample)
    return Shard(config, samples)


def decode_vector(datum: bytes, dtype: str) -> npt.NDArray[Any]:
    """A 1-D `ndarray:<dtype>` value of dynamic shape: one header byte (dimensions, and the
    shape's dtype in its low two bits), the shape, then the values."""
    header = datum[0]
    if header >> 2 != 1:
        raise ValueError(f"expected a 1-D array, its header says {header >> 2} dimensions")
    skip = 1 + (1 << (header & 3))
    return np.frombuffer(datum, np.dtype(dtype), offset=skip)


def write_shard(config: dict[str, Any], samples: list[Sample], out: Path) -> dict[str, Any]:
    """Write `samples` as one shard file `out` with `config`'s columns and size limit; return
    its `index.json` entry (named after `out`)."""
    columns = dict(zip(config["column_names"], config["column_encodings"], strict=True))
    with tempfile.TemporaryDirectory(prefix="fm-purge-shard-", dir=out.parent) as staging:
        writer = MDSShardWriter(Path(staging), columns, int(config["size_limit"]))
        for sample in samples:
            writer.write(sample)
        entries = writer.finish()
        if len(entries) != 1:
            raise RuntimeError(f"rewriting {out.name} gave {len(entries)} shards, expected one")
        entry = entries[0]
        (Path(staging) / entry["raw_data"]["basename"]).replace(out)
    entry["raw_data"]["basename"] = out.name
    return entry
