"""Random access to the samples of a local shard set, in place, with checksums on first use.

A set served from S3 is read the same way from its local cache entry (`fm_loader.cache`).

Shards are uncompressed MDS files, so we memory-map each one and hand the byte range of a sample
to mosaicml-streaming's `MDSReader.decode_sample`: MDS owns the format, we avoid its per-sample
open/seek/read (`MDSReader.get_sample_data`) and never copy a shard.
"""

from __future__ import annotations

import hashlib
import json
import mmap
from pathlib import Path
from typing import Any

import numpy as np

from fm_loader.manifest import INDEX_NAME, ShardSetManifest, mds_columns

REBUILD_HINT = "rebuild it with `fm shards build {version} --tokenizer PATH --seq-len {seq_len}`"


class ShardSet:
    """The shards of one shard set: index.json checked against the manifest at construction."""

    def __init__(
        self, directory: Path, manifest: ShardSetManifest, *, cached_from: str | None = None
    ) -> None:
        """`cached_from`: the remote URI when `directory` is a cache entry (for error messages)."""
        from streaming.base.format import reader_from_json  # 10-16 s import, paid once per process

        self.directory = directory
        self.manifest = manifest
        self.rebuild_hint = REBUILD_HINT.format(
            version=manifest.source_version, seq_len=manifest.seq_len
        )
        # A damaged cached copy is fixed by downloading it again, not by rebuilding the set.
        self.corrupt_hint = (
            f"{directory} is a cached copy of {cached_from}: delete it and the next "
            "make_dataset downloads it again"
            if cached_from
            else self.rebuild_hint
        )
        index = self._read_index()
        self._check_index(index)
        self._readers = [reader_from_json(str(directory), None, s) for s in index["shards"]]
        self._bounds = np.cumsum([0] + [s.samples for s in manifest.shards])
        self._maps: dict[int, mmap.mmap] = {}

    def __len__(self) -> int:
        return self.manifest.num_samples

    def __getstate__(self) -> dict[str, Any]:
        # Memory maps do not pickle (spawned DataLoader workers); a worker re-opens and
        # re-verifies the shards it uses.
        state = self.__dict__.copy()
        state["_maps"] = {}
        return state

    def _read_index(self) -> dict[str, Any]:
        path = self.directory / INDEX_NAME
        try:
            index: dict[str, Any] = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read MDS index {path}: {exc}; {self.corrupt_hint}") from exc
        return index

    def _check_index(self, index: dict[str, Any]) -> None:
        """index.json must describe exactly the manifest's shards, in our column layout."""
        columns = mds_columns(self.manifest.seq_len, self.manifest.token_dtype)
        names, encodings = sorted(columns), [columns[c] for c in sorted(columns)]
        shards = index.get("shards", [])
        listed = [(s.name, s.samples, s.bytes) for s in self.manifest.shards]
        found = [(s["raw_data"]["basename"], s["samples"], s["raw_data"]["bytes"]) for s in shards]
        if listed != found:
            raise ValueError(
                f"{self.directory}: index.json lists shards {found}, the manifest {listed}; "
                f"the shard set is inconsistent, {self.corrupt_hint}"
            )
        for shard in shards:
            if shard["column_names"] != names or shard["column_encodings"] != encodings:
                raise ValueError(
                    f"{self.directory}/{shard['raw_data']['basename']}: columns "
                    f"{dict(zip(shard['column_names'], shard['column_encodings'], strict=False))} "
                    f"differ from the loader's schema {columns}; {self.rebuild_hint}"
                )
            if shard.get("compression") or shard.get("zip_data"):
                raise ValueError(
                    f"{self.directory}: shard {shard['raw_data']['basename']} is compressed; "
                    f"shard sets are stored uncompressed so they can be memory-mapped; "
                    f"{self.rebuild_hint}"
                )

    def _open(self, shard: int) -> mmap.mmap:
        """Map a shard, verifying its sha256 against the manifest the first time it is used."""
        mapped = self._maps.get(shard)
        if mapped is not None:
            return mapped
        info = self.manifest.shards[shard]
        path = self.directory / info.name
        try:
            with open(path, "rb") as f:
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot open shard {path}: {exc}; {self.corrupt_hint}") from exc
        # Hash the mapped bytes themselves: what we verify is exactly what we serve.
        digest = hashlib.sha256(mapped).hexdigest()
        if digest != info.sha256 or len(mapped) != info.bytes:
            mapped.close()
            raise ValueError(
                f"shard {info.name} of {self.manifest.shard_set_key} failed its checksum: "
                f"expected sha256 {info.sha256} ({info.bytes} bytes), got {digest} "
                f"({path.stat().st_size} bytes); the file is corrupt, {self.corrupt_hint}"
            )
        self._maps[shard] = mapped
        return mapped

    def locate(self, index: int) -> tuple[int, int]:
        """(shard number, sample number inside the shard) of a global sample index."""
        if not 0 <= index < len(self):
            raise IndexError(f"sample {index} out of range [0, {len(self)})")
        shard = int(np.searchsorted(self._bounds, index, side="right")) - 1
        return shard, index - int(self._bounds[shard])

    def where(self, index: int) -> str:
        shard, local = self.locate(index)
        return f"shard {self.manifest.shards[shard].name} sample {local}"

    def raw_sample(self, index: int) -> dict[str, Any]:
        """The decoded MDS columns {input_ids, doc_ids, doc_spans} of global sample `index`."""
        shard, local = self.locate(index)
        mapped = self._open(shard)
        # MDS joint shard layout: uint32 sample count, then count + 1 uint32 byte offsets.
        begin, end = np.frombuffer(mapped, np.uint32, count=2, offset=4 * (1 + local)).tolist()
        return self._readers[shard].decode_sample(mapped[begin:end])

    def close(self) -> None:
        for mapped in self._maps.values():
            mapped.close()
        self._maps.clear()
