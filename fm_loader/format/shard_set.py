"""Random access to the samples of a local shard set, in place, with checksums on first use.

A set served from S3 is read the same way from its local cache entry (`fm_loader.storage.cache`).

Shards are uncompressed MDS files, so we memory-map each one and read a sample's columns in
place (input_ids as a view, doc_ids as UTF-8, doc_spans in MDS's 1-D ndarray layout), never
copying a shard; anything else goes through mosaicml-streaming's own decoders
(`MDSReader.decode_sample`), imported (~2 s: torch) only when first needed.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fm_loader.format.manifest import ShardSetManifest, mds_columns
from fm_loader.format.mapped import OFFSET_PAIR, MappedShards, Refetch
from fm_loader.format.mds import defer_streaming_packages

REBUILD_HINT = "rebuild it with `fm shards build {version} --tokenizer PATH --seq-len {seq_len}`"


@dataclass(frozen=True)
class _MdsDecoders:
    """mosaicml-streaming's per-shard readers and its doc_spans decoder."""

    readers: list[Any]
    spans: Any


class ShardSet(MappedShards):
    """The shards of one shard set: index.json checked against the manifest at construction."""

    def __init__(
        self, directory: Path, manifest: ShardSetManifest, *, remote: Refetch | None = None
    ) -> None:
        """`remote`: where `directory` was downloaded from when it is a cache entry; a shard
        that fails its checksum is then fetched again once before the loader gives up."""
        self.manifest = manifest
        super().__init__(
            directory,
            manifest.shard_set_key,
            manifest.shards,
            mds_columns(manifest.seq_len, manifest.token_dtype),
            rebuild_hint=REBUILD_HINT.format(
                version=manifest.source_version, seq_len=manifest.seq_len
            ),
            remote=remote,
        )
        # mosaicml-streaming's own decoders (a ~2 s import) load only for what our in-place
        # reading does not cover: `raw_sample`, and doc_spans of another shape.
        self._mds: _MdsDecoders | None = None

    def __getstate__(self) -> dict[str, Any]:
        # MDS's decoders are left behind: a spawned worker then never imports mosaicml-streaming's
        # format modules (~2 s) unless it meets a sample our own decoding does not cover.
        state = super().__getstate__()
        state["_mds"] = None
        return state

    def _mds_decoders(self) -> _MdsDecoders:
        if self._mds is None:
            defer_streaming_packages()  # the format modules alone: not streaming's datasets
            from streaming.base.format import reader_from_json
            from streaming.base.format.mds.encodings import _get_coder

            columns = mds_columns(self.manifest.seq_len, self.manifest.token_dtype)
            spans_coder = _get_coder(columns["doc_spans"])
            if spans_coder is None:  # only if mosaicml-streaming dropped the ndarray encoding
                raise ValueError("mosaicml-streaming has no ndarray:int32 decoder; reinstall it")
            readers = [reader_from_json(str(self.directory), None, s) for s in self.index_shards]
            self._mds = _MdsDecoders(readers, spans_coder)
        return self._mds

    def raw_sample(self, index: int) -> dict[str, Any]:
        """The decoded MDS columns {input_ids, doc_ids, doc_spans} of global sample `index`."""
        shard, local = self.locate(index)
        mapped = self.open_shard(shard)
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
        shards = np.searchsorted(self.bounds, indices, side="right") - 1
        if len(indices) and (indices.min() < 0 or indices.max() >= len(self)):
            raise IndexError(f"sample indices out of range [0, {len(self)})")
        bounds = self.bounds
        for row, (index, shard) in enumerate(zip(indices.tolist(), shards.tolist(), strict=True)):
            mapped = self.maps.get(shard) or self.open_shard(shard)
            local = index - int(bounds[shard])
            begin, end = OFFSET_PAIR.unpack_from(mapped, 4 * (1 + local))
            tokens[row] = np.frombuffer(mapped, dtype, count=seq_len, offset=end - width)
            ids_size, spans_size = OFFSET_PAIR.unpack_from(mapped, begin)
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
