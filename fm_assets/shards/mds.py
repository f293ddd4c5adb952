"""MDS shard files and their `index.json`, byte for byte as mosaicml-streaming's `MDSWriter`
writes them (uncompressed, sha256 hashes), without importing torch.

Why not `MDSWriter` itself: its module imports `streaming.base.util`, which imports torch: 1.4-1.9 s
of every `fm shards build`, whose whole budget is 5 s, for a writer that only concatenates bytes.
The format (MDS version 2) is small:

    shard.NNNNN.mds   uint32 sample count n | uint32 offsets[n + 1] (from the file's start) |
                      the writer's config as JSON | the samples
    a sample          uint32 size of each variable-size column, in column order | each column's
                      bytes, in column order (columns sorted by name)
    index.json        {"shards": [one entry per shard: the config, "samples", "raw_data":
                      {"basename", "bytes", "hashes"}, "zip_data": null], "version": 2}

A new shard starts when the next sample would take the current one past the size limit.
`tests/test_shard_writer.py` writes the same samples with this writer and with `MDSWriter` and
compares every file; readers (`fm_loader`, `streaming.StreamingDataset`) read the sets with
streaming's own reader.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fm_loader.format.manifest import INDEX_NAME

MDS_VERSION = 2
_OFFSET_BYTES = 4  # each sample's uint32 offset in its shard's header
# MDS's codes for the dtype of an array's shape (the low two bits of the shape byte).
_SHAPE_DTYPES = ("uint8", "uint16", "uint32", "uint64")
_VARIABLE_SIZE = ("bytes", "str")


class NDArrayEncoding:
    """MDS's `ndarray:<dtype>[:<shape>]` encoding, parsed once: the values' bytes, after a shape
    header when the encoding leaves the shape open."""

    def __init__(self, encoding: str) -> None:
        kind, _, rest = encoding.partition(":")
        dtype, _, shape = rest.partition(":")
        if kind != "ndarray" or not dtype:
            raise ValueError(f"{encoding!r} is not an ndarray:<dtype>[:<shape>] MDS encoding")
        self.encoding = encoding
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(d) for d in shape.split(",")) if shape else None
        # Bytes of every value (None: each value's size is stored with it).
        self.size = None if self.shape is None else int(np.prod(self.shape)) * self.dtype.itemsize

    def encode(self, values: npt.NDArray[Any]) -> bytes:
        if values.dtype != self.dtype:
            raise ValueError(f"wrong dtype for {self.encoding}: {values.dtype.name}")
        if values.size == 0:
            raise ValueError(f"MDS cannot store an empty array ({self.encoding})")
        if self.shape is not None:
            if values.shape != self.shape:
                raise ValueError(f"wrong shape for {self.encoding}: {values.shape}")
            return values.tobytes()
        dims = np.array(values.shape, np.int64)
        largest = int(dims.max())
        code = next(i for i, bits in enumerate((8, 16, 32, 64)) if largest < 1 << bits)
        header = bytes([(values.ndim << 2) | code]) + dims.astype(_SHAPE_DTYPES[code]).tobytes()
        return header + values.tobytes()


def column_size(encoding: str) -> int | None:
    """Bytes of every value of an MDS column (None: each value's size is stored with it).

    Supports the encodings shard sets use: `bytes`, `str` and `ndarray[:dtype[:shape]]`.
    """
    if encoding in _VARIABLE_SIZE:
        return None
    if not encoding.startswith("ndarray"):
        raise ValueError(
            f"MDS encoding {encoding!r} is not written by this writer; use bytes, str or ndarray"
        )
    return NDArrayEncoding(encoding).size


class MDSShardWriter:
    """Writes samples (each column's encoded bytes) into `directory` as MDS shards; `finish()`
    writes `index.json`, so a directory without one never looks like a finished set."""

    def __init__(self, directory: Path, columns: Mapping[str, str], size_limit: int) -> None:
        if not 0 < size_limit < 1 << 32:
            raise ValueError(f"MDS shard size limit must be in (0, 2**32), got {size_limit}")
        self.directory = directory
        self.names = sorted(columns)
        self.sizes = [column_size(columns[name]) for name in self.names]
        self.config: dict[str, Any] = {
            "column_encodings": [columns[name] for name in self.names],
            "column_names": self.names,
            "column_sizes": self.sizes,
            "compression": None,
            "format": "mds",
            "hashes": ["sha256"],
            "size_limit": size_limit,
            "version": MDS_VERSION,
        }
        self._config_json = json.dumps(self.config, sort_keys=True).encode("utf-8")
        self._shards: list[dict[str, Any]] = []
        self._samples: list[bytes] = []
        self._bytes = self._empty_shard_bytes()
        directory.mkdir(parents=True, exist_ok=True)

    def write(self, sample: Mapping[str, bytes]) -> None:
        """Add one sample; a full shard is written first if this one would overflow it."""
        sizes: list[int] = []
        parts: list[bytes] = []
        for name, size in zip(self.names, self.sizes, strict=True):
            datum = sample[name]
            if size is None:
                sizes.append(len(datum))
            elif len(datum) != size:
                raise ValueError(f"column {name} holds {len(datum)} bytes, its encoding {size}")
            parts.append(datum)
        encoded = np.array(sizes, np.uint32).tobytes() + b"".join(parts)
        if self.config["size_limit"] < self._bytes + len(encoded) + _OFFSET_BYTES:
            self._write_shard()
        self._samples.append(encoded)
        self._bytes += len(encoded) + _OFFSET_BYTES

    def finish(self) -> list[dict[str, Any]]:
        """Write the last shard and `index.json`; the index's shard entries."""
        if self._samples:
            self._write_shard()
        index = {"shards": self._shards, "version": MDS_VERSION}
        with open(self.directory / INDEX_NAME, "w", encoding="utf-8") as out:
            json.dump(index, out, sort_keys=True)
        return self._shards

    def _empty_shard_bytes(self) -> int:
        return 2 * _OFFSET_BYTES + len(self._config_json)

    def _write_shard(self) -> None:
        count = len(self._samples)
        header = _OFFSET_BYTES * (count + 2) + len(self._config_json)
        offsets = np.cumsum([0, *map(len, self._samples)], dtype=np.int64) + header
        head = [np.uint32(count).tobytes(), offsets.astype(np.uint32).tobytes(), self._config_json]
        data = b"".join([*head, *self._samples])
        basename = f"shard.{len(self._shards):05}.mds"
        with open(self.directory / basename, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        raw = {
            "basename": basename,
            "bytes": len(data),
            "hashes": {"sha256": hashlib.sha256(data).hexdigest()},
        }
        self._shards.append({"raw_data": raw, "samples": count, "zip_data": None, **self.config})
        self._samples = []
        self._bytes = self._empty_shard_bytes()
