"""Find byte strings anywhere in a tree of files, looking inside the containers the platform
writes: every file's raw bytes, and decoded, gzip (every member), zstd, Parquet (every value
of every column of every row group, nested ones too, integers as little-endian bytes; the
footer's statistics are raw bytes),
Avro object containers (Iceberg manifests and manifest lists: every block decompressed) and tar
members (each scanned like a file). MDS shards are uncompressed (their raw bytes are the
samples); a `.zstd` shard is decompressed like any zstd file.

A purge test plants a string and asserts `scan` finds it nowhere.
"""

from __future__ import annotations

import io
import tarfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


@dataclass(frozen=True)
class Found:
    where: str  # file, and the container path inside it
    needle: bytes


def scan_tree(root: Path, needles: Iterable[bytes]) -> list[Found]:
    """Every place under `root` holding one of `needles`."""
    wanted = list(needles)
    found: list[Found] = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        try:
            data = path.read_bytes()
        except OSError:
            continue  # a socket, or a file gone meanwhile (a lock, a temporary file)
        found += scan_bytes(str(path), data, wanted)
    return found


def scan_bytes(where: str, data: bytes, needles: list[bytes], depth: int = 0) -> list[Found]:
    """Every needle in `data`, raw or inside the containers it is."""
    found = [Found(where, n) for n in needles if n in data]
    if depth > 4:
        return found
    for how, inner in _decoded(data):
        found += [Found(f"{where} ({how})", n) for n in needles if n in inner]
    for how, member in _members(data):
        found += scan_bytes(f"{where}!{how}", member, needles, depth + 1)
    return found


def _decoded(data: bytes) -> Iterator[tuple[str, bytes]]:
    """Each decoded view of `data` (as one byte string) this module knows."""
    if data[:2] == b"\x1f\x8b":
        yield "gzip", _gunzip(data)
    if data[:4] == b"\x28\xb5\x2f\xfd":
        import zstandard

        yield "zstd", zstandard.ZstdDecompressor().decompressobj().decompress(data)
    if data[:4] == b"PAR1" and data[-4:] == b"PAR1":
        yield "parquet values", b"\x00".join(_parquet_values(data))
    if data[:4] == b"Obj\x01":
        yield "avro blocks", b"\x00".join(_avro_blocks(data))


def _members(data: bytes) -> Iterator[tuple[str, bytes]]:
    """Files inside `data`: tar members, and what a gzip or zstd stream decompresses to."""
    if len(data) > 262 and data[257:262] == b"ustar":
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                extracted = tar.extractfile(member) if member.isfile() else None
                if extracted is not None:
                    yield member.name, extracted.read()
    for how, inner in _decoded(data):
        if how in ("gzip", "zstd"):
            yield how, inner


def _gunzip(data: bytes) -> bytes:
    """Every member of a (multi-member) gzip stream, concatenated."""
    out = []
    while data[:2] == b"\x1f\x8b":
        member = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out.append(member.decompress(data))
        data = member.unused_data
    return b"".join(out)


def _parquet_values(data: bytes) -> Iterator[bytes]:
    """The value bytes of every column of every row group (the data buffers of string, binary
    and integer arrays; nested arrays by their children)."""
    parquet = pq.ParquetFile(io.BytesIO(data))
    for group in range(parquet.num_row_groups):
        table = parquet.read_row_group(group)
        for column in table.columns:
            for chunk in column.chunks:
                yield from _array_bytes(chunk)


def _array_bytes(array: pa.Array) -> Iterator[bytes]:
    kind = array.type
    if pa.types.is_dictionary(kind):
        yield from _array_bytes(array.dictionary)
    elif pa.types.is_struct(kind):
        for i in range(kind.num_fields):
            yield from _array_bytes(array.field(i))
    elif pa.types.is_map(kind):
        yield from _array_bytes(array.keys)
        yield from _array_bytes(array.items)
    elif (
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    ):
        yield from _array_bytes(array.values)
    elif (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_fixed_size_binary(kind)
    ):
        buffers = array.buffers()
        if buffers[-1] is not None:
            yield buffers[-1].to_pybytes()
    elif pa.types.is_integer(kind):
        # Token ids: the values buffer, little-endian as Arrow holds it.
        values = array.buffers()[1]
        if values is not None:
            yield values.to_pybytes()


def _read_long(data: bytes, at: int) -> tuple[int, int]:
    """An Avro long (zig-zag varint) at `at`; the value and the position after it."""
    shift = value = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), at


def _avro_blocks(data: bytes) -> Iterator[bytes]:
    """The header's metadata and every data block of an Avro object container, decompressed."""
    at = 4
    metadata: dict[bytes, bytes] = {}
    while True:
        count, at = _read_long(data, at)
        if count == 0:
            break
        if count < 0:
            _, at = _read_long(data, at)  # the block's size in bytes
            count = -count
        for _ in range(count):
            size, at = _read_long(data, at)
            key = data[at : at + size]
            at += size
            size, at = _read_long(data, at)
            metadata[key] = data[at : at + size]
            at += size
    yield b"\x00".join(metadata.values())
    codec = metadata.get(b"avro.codec", b"null")
    at += 16  # the sync marker
    while at < len(data):
        _, at = _read_long(data, at)  # objects in the block
        size, at = _read_long(data, at)
        block = data[at : at + size]
        at += size + 16
        if codec == b"deflate":
            yield zlib.decompress(block, -zlib.MAX_WBITS)
        elif codec == b"zstandard":
            import zstandard

            yield zstandard.ZstdDecompressor().decompressobj().decompress(block)
        elif codec == b"null":
            yield block
        else:
            raise ValueError(f"Avro codec {codec!r} is not decoded by this scan")
