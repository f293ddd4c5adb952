"""Random access to the samples of a local shard set, in place, with checksums on first use.

A set served from S3 is read the same way from its local cache entry (`fm_loader.cache`).

Shards are uncompressed MDS files, so we memory-map each one and read a sample's columns in
place (input_ids as a view, doc_ids as UTF-8, doc_spans in MDS's 1-D ndarray layout), never
copying a shard; anything else goes through mosaicml-streaming's own decoders
(`MDSReader.decode_sample`), imported (10-16 s) only when first needed.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from fm_loader.manifest import INDEX_NAME, ShardSetManifest, mds_columns

if TYPE_CHECKING:
    from fm_loader.fetch import RemoteShards

_OFFSET_PAIR = struct.Struct("<II")  # MDS: consecutive uint32 sample offsets / column sizes
REBUILD_HINT = "rebuild it with `fm shards build {version} --tokenizer PATH --seq-len {seq_len}`"


@dataclass(frozen=True)
class _MdsDecoders:
    """mosaicml-streaming's per-shard readers and its doc_spans decoder."""

    readers: list[Any]
    spans: Any


class ShardSet:
    """The shards of one shard set: index.json checked against the manifest at construction."""

    def __init__(
        self, directory: Path, manifest: ShardSetManifest, *, remote: RemoteShards | None = None
    ) -> None:
        """`remote`: where `directory` was downloaded from when it is a cache entry; a shard
        that fails its checksum is then fetched again once before the loader gives up."""
        self.directory = directory
        self.manifest = manifest
        self.rebuild_hint = REBUILD_HINT.format(
            version=manifest.source_version, seq_len=manifest.seq_len
        )
        # A damaged cached copy is fixed by downloading it again, not by rebuilding the set.
        self.corrupt_hint = (
            f"{directory} is a cached copy of {remote.uri}: delete it and the next "
            "make_dataset downloads it again"
            if remote is not None
            else self.rebuild_hint
        )
        index = self._read_index()
        self._check_index(index)
        self._index_shards: list[dict[str, Any]] = index["shards"]
        # mosaicml-streaming's own decoders (a 10-16 s import) load only for what our in-place
        # reading does not cover: `raw_sample`, and doc_spans of another shape.
        self._mds: _MdsDecoders | None = None
        self._bounds = np.cumsum([0] + [s.samples for s in manifest.shards])
        self._maps: dict[int, mmap.mmap] = {}
        self.remote = remote
        self.fetch_latencies: list[float] = []  # seconds to map + verify (+ refetch) each shard
        self.refetched_bytes = 0  # cached shards that failed their check and were fetched again

    def __len__(self) -> int:
        return self.manifest.num_samples

    def __getstate__(self) -> dict[str, Any]:
        # Memory maps do not pickle (spawned DataLoader workers); a worker re-opens and
        # re-verifies the shards it uses. MDS's decoders are left behind too: a spawned worker
        # then never imports mosaicml-streaming (10-16 s) unless it meets a sample our own
        # decoding does not cover.
        state = self.__dict__.copy()
        state["_maps"] = {}
        state["_mds"] = None
        return state

    def _mds_decoders(self) -> _MdsDecoders:
        if self._mds is None:
            from streaming.base.format import reader_from_json  # 10-16 s import, once a process
            from streaming.base.format.mds.encodings import _get_coder

            columns = mds_columns(self.manifest.seq_len, self.manifest.token_dtype)
            spans_coder = _get_coder(columns["doc_spans"])
            if spans_coder is None:  # only if mosaicml-streaming dropped the ndarray encoding
                raise ValueError("mosaicml-streaming has no ndarray:int32 decoder; reinstall it")
            readers = [reader_from_json(str(self.directory), None, s) for s in self._index_shards]
            self._mds = _MdsDecoders(readers, spans_coder)
        return self._mds

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
        """Map a shard, verifying its sha256 against the manifest the first time it is used.

        A cached copy that fails is fetched again once; a local set's shard raises at once.
        """
        mapped = self._maps.get(shard)
        if mapped is not None:
            return mapped
        started = time.perf_counter()
        info = self.manifest.shards[shard]
        problem = None
        for attempt in range(2 if self.remote is not None else 1):
            if attempt:
                self.remote.refetch(info)  # type: ignore[union-attr]
                self.refetched_bytes += info.bytes
            mapped, problem = self._map_verified(shard)
            if mapped is not None:
                self._maps[shard] = mapped
                self.fetch_latencies.append(time.perf_counter() - started)
                return mapped
        raise ValueError(f"{problem}; {self.corrupt_hint}")

    def _map_verified(self, shard: int) -> tuple[mmap.mmap | None, str]:
        info = self.manifest.shards[shard]
        path = self.directory / info.name
        try:
            with open(path, "rb") as f:
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            return None, f"cannot open shard {path}: {exc}"
        # Hash the mapped bytes themselves: what we verify is exactly what we serve.
        digest = hashlib.sha256(mapped).hexdigest()
        if digest != info.sha256 or len(mapped) != info.bytes:
            size = len(mapped)
            mapped.close()
            return None, (
                f"shard {info.name} of {self.manifest.shard_set_key} failed its checksum: "
                f"expected sha256 {info.sha256} ({info.bytes} bytes), got {digest} "
                f"({size} bytes); the file is corrupt"
            )
        return mapped, ""

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
        sample: dict[str, Any] = (
            self._mds_decoders().readers[shard].decode_sample(mapped[begin:end])
        )
        return sample

    def read_raw(
        self, indices: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[Any], list[npt.NDArray[np.int32]], list[list[str]]]:
        """Tokens [len(indices), seq_len] and each sample's segment table and doc ids.

        input_ids is the last column and fixed-size, so its bytes end each sample: one numpy
        view per sample, no decode. The two variable columns go through MDS's own decoders.
        """
        seq_len = self.manifest.seq_len
        dtype = np.dtype(self.manifest.token_dtype)
        width = seq_len * dtype.itemsize
        tokens = np.empty((len(indices), seq_len), dtype=dtype)
        spans: list[npt.NDArray[np.int32]] = []
        doc_ids: list[list[str]] = []
        shards = np.searchsorted(self._bounds, indices, side="right") - 1
        if len(indices) and (indices.min() < 0 or indices.max() >= len(self)):
            raise IndexError(f"sample indices out of range [0, {len(self)})")
        bounds = self._bounds
        for row, (index, shard) in enumerate(zip(indices.tolist(), shards.tolist(), strict=True)):
            mapped = self._maps.get(shard) or self._open(shard)
            local = index - int(bounds[shard])
            begin, end = _OFFSET_PAIR.unpack_from(mapped, 4 * (1 + local))
            tokens[row] = np.frombuffer(mapped, dtype, count=seq_len, offset=end - width)
            ids_size, spans_size = _OFFSET_PAIR.unpack_from(mapped, begin)
            at = begin + 8
            doc_ids.append(mapped[at : at + ids_size].decode("utf-8").split("\n"))
            at += ids_size
            spans.append(self._decode_spans(mapped, at, spans_size))
        return tokens, spans, doc_ids

    def _decode_spans(self, mapped: mmap.mmap, at: int, size: int) -> npt.NDArray[np.int32]:
        """The doc_spans column: MDS's 1-D dynamic-shape ndarray read in place (one header byte,
        the shape, then int32 values); anything else goes through MDS's own decoder."""
        header = mapped[at]
        if header >> 2 == 1:  # one dimension
            skip = 1 + (1 << (header & 3))
            return np.frombuffer(mapped, np.int32, count=(size - skip) // 4, offset=at + skip)
        coder = self._mds_decoders().spans
        return coder.decode(mapped[at : at + size])  # type: ignore[no-any-return]

    def close(self) -> None:
        for mapped in self._maps.values():
            mapped.close()
        self._maps.clear()
