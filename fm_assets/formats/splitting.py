"""Where a large landed file can be cut so its parts are read in parallel, and reading one part.

A gzipped WARC is a series of gzip members, one record each: it can be cut at member boundaries,
found by one decompressing pass (`gzip_split_points`). An uncompressed JSONL file can be cut after
any newline (`line_split_points`, no pass needed). Each part is a byte range `[start, end)` of the
file that the ordinary readers parse as if it were a file of its own.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Iterator
from typing import BinaryIO, Final

_READ_CHUNK: Final = 1 << 20
_GZIP_MAGIC: Final = b"\x1f\x8b"
_LINE_SEARCH: Final = 1 << 16


def gzip_member_starts(stream: BinaryIO) -> Iterator[int]:
    """Byte offsets at which the gzip members of `stream` start, in order, read in one pass.

    Stops at the first bytes that do not start a member (trailing junk or damage): everything from
    there on stays in the last part, where the reader reports it.
    """
    offset = 0  # compressed offset of the member being inflated
    consumed = 0  # compressed bytes fed to the current member so far
    pending = b""
    inflater: zlib._Decompress | None = None
    while True:
        chunk = pending or stream.read(_READ_CHUNK)
        pending = b""
        if not chunk:
            return
        if inflater is None:
            if not chunk.startswith(_GZIP_MAGIC):
                return
            yield offset
            inflater = zlib.decompressobj(wbits=31)
            consumed = 0
        try:
            inflater.decompress(chunk)
        except zlib.error:
            return  # a damaged member: the reader of its part reports it
        if inflater.eof:
            used = len(chunk) - len(inflater.unused_data)
            offset += consumed + used
            pending = inflater.unused_data
            inflater = None
        else:
            consumed += len(chunk)


def gzip_split_points(stream: BinaryIO, part_bytes: int) -> list[int]:
    """Starts of the parts of a multi-member gzip file: 0, then the first member at or after each
    multiple of `part_bytes`. One part when the file is a single member."""
    points = [0]
    for start in gzip_member_starts(stream):
        if start >= points[-1] + part_bytes:
            points.append(start)
    return points


def line_split_points(stream: BinaryIO, size: int, part_bytes: int) -> list[int]:
    """Starts of the parts of a line-oriented file of `size` bytes: 0, then the byte after the first
    newline at or after each multiple of `part_bytes` (a seek and a short read each)."""
    points = [0]
    cut = part_bytes
    while cut < size:
        stream.seek(cut)
        found = -1
        position = cut
        while found < 0:
            block = stream.read(_LINE_SEARCH)
            if not block:
                return points
            found = block.find(b"\n")
            if found < 0:
                position += len(block)
        start = position + found + 1
        if start >= size:
            break
        if start > points[-1]:
            points.append(start)
        cut = max(cut + part_bytes, start)
    return points


class RangeReader(io.RawIOBase):
    """The bytes `[start, end)` of a seekable stream, read as a stream of their own."""

    def __init__(self, stream: BinaryIO, start: int, end: int | None) -> None:
        super().__init__()
        self._stream = stream
        self._remaining = None if end is None else max(0, end - start)
        stream.seek(start)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        size = len(buffer)
        if self._remaining is not None:
            size = min(size, self._remaining)
        if size == 0:
            return 0
        data = self._stream.read(size)
        buffer[: len(data)] = data
        if self._remaining is not None:
            self._remaining -= len(data)
        return len(data)
