"""Membership tests against Parquet's split-block Bloom filters, reading 32 bytes a key.

A keyed file's writer (`files`) asks pyarrow for a Bloom filter on each row group's key column
(a band hash, a document id). Parquet stores it beside the data: a small header, then a bitset
of 32-byte blocks. A key hashes (XXH64 of its plain encoding: a 64-bit integer's 8
little-endian bytes, a string's UTF-8 bytes) to one block and eight bits in it, so testing a
key reads one block at an offset computed from the hash, not the filter: what a lookup reads
of a filter follows its keys, not the row group's size. A key whose bits are not all set is in
no row of the group; one whose bits are may be (about 0.2% of absent keys at the writer's
settings), and the row group is read to see.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import xxhash

U64 = npt.NDArray[np.uint64]

# The salts of the split-block Bloom filter (Parquet format, BloomFilter.md).
_SALT = np.array(
    [
        0x47B6137B,
        0x44974D91,
        0x8824AD5B,
        0xA2B7289D,
        0x705495C7,
        0x2DF1424B,
        0x9EFC4947,
        0x5C6BFB31,
    ],
    dtype=np.uint32,
)
# XXH64's primes.
_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
BLOCK_BYTES = 32
# The header every filter pyarrow writes has after its size: the split-block algorithm, the
# XXH64 hash, no compression (thrift compact encoding: the only values the format defines).
_HEADER_TAIL = bytes.fromhex("1c1c00001c1c00001c1c000000")


def _rotl(x: U64, bits: int) -> U64:
    return (x << np.uint64(bits)) | (x >> np.uint64(64 - bits))


def hash_int64(values: npt.NDArray[np.int64]) -> U64:
    """XXH64 (seed 0) of each value's 8 little-endian bytes: a Parquet INT64 key's hash."""
    with np.errstate(over="ignore"):
        x: U64 = np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)
        k = _rotl(x * _P2, 31) * _P1
        h: U64 = _rotl((_P5 + np.uint64(8)) ^ k, 27) * _P1 + _P4
        h = (h ^ (h >> np.uint64(33))) * _P2
        h = (h ^ (h >> np.uint64(29))) * _P3
        return h ^ (h >> np.uint64(32))


def hash_strings(values: Sequence[str]) -> U64:
    """XXH64 (seed 0) of each string's UTF-8 bytes: a Parquet BYTE_ARRAY key's hash."""
    return np.array([xxhash.xxh64_intdigest(v.encode()) for v in values], dtype=np.uint64)


@dataclass(frozen=True)
class Filter:
    """Where one column chunk's filter bitset lies in its file."""

    offset: int  # of the bitset's first byte
    blocks: int

    def block_of(self, hashes: U64) -> npt.NDArray[np.int64]:
        """The block each hash's bits lie in."""
        with np.errstate(over="ignore"):
            top = hashes >> np.uint64(32)
            return ((top * np.uint64(self.blocks)) >> np.uint64(32)).astype(np.int64)


def parse_header(header: bytes, length: int, offset: int) -> Filter | None:
    """The bitset of a filter of `length` bytes at `offset` whose first bytes are `header`;
    None if the header is not one this reader knows (the row group is then read)."""
    if not header or header[0] != 0x15:  # field 1 (numBytes), an i32
        return None
    value, shift, position = 0, 0, 1
    while position < len(header):
        byte = header[position]
        value |= (byte & 0x7F) << shift
        position += 1
        shift += 7
        if not byte & 0x80:
            break
    else:
        return None
    size = (value >> 1) ^ -(value & 1)  # zigzag
    if header[position : position + len(_HEADER_TAIL)] != _HEADER_TAIL:
        return None
    start = position + len(_HEADER_TAIL)
    if size <= 0 or size % BLOCK_BYTES or start + size != length:
        return None
    return Filter(offset + start, size // BLOCK_BYTES)


def may_contain(blocks: npt.NDArray[np.uint32], hashes: U64) -> npt.NDArray[np.bool_]:
    """Whether each hash's eight bits are set in its block (`blocks`: one row of eight uint32
    words per hash, the block `Filter.block_of` names)."""
    with np.errstate(over="ignore"):
        key = (hashes & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        bits = (key[:, None] * _SALT[None, :]) >> np.uint32(27)
    return np.all((blocks >> bits) & np.uint32(1), axis=1)


def read_blocks_at(file: Any, offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.uint32]:
    """The 32-byte blocks at byte `offsets` (sorted, unique) of an open file, as rows of eight
    words; each run of adjacent blocks is one read."""
    out = np.empty((len(offsets), 8), dtype=np.uint32)
    breaks = np.flatnonzero(np.diff(offsets) != BLOCK_BYTES) + 1
    for start, end in zip([0, *breaks.tolist()], [*breaks.tolist(), len(offsets)], strict=True):
        count = end - start
        data = file.read_at(count * BLOCK_BYTES, int(offsets[start]))
        if len(data) != count * BLOCK_BYTES:
            raise OSError(f"a Bloom filter block of {file} ends early: the file is truncated")
        out[start:end] = np.frombuffer(data, dtype="<u4").reshape(count, 8)
    return out
