"""A landed file's content as a buffered stream, gunzipped when needed, that never loses data.

Damage (a cut or corrupt gzip stream) reads as a clean end of data, and `ContentStream.damage`
says what happened: readers see every byte before the damage, then decide what the early end
means for the record they were in. Errors of the underlying source (network, disk) are not
damage and propagate, so the caller can retry the file.
"""

from __future__ import annotations

import bisect
import io
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

_BUFFER_BYTES: Final = 1 << 16
_INFLATE_CHUNK: Final = 1 << 20  # bound on output per zlib call: a gzip bomb cannot exhaust memory


@dataclass(frozen=True)
class StreamDamage:
    """Why the decompressed data ended early."""

    truncated: bool  # True: the data just stops (cut file); False: corrupt compressed data
    detail: str


class Readable(Protocol):
    """Anything with `read(size) -> bytes`: a landed file's stream, or a ContentStream."""

    def read(self, size: int = -1, /) -> bytes: ...


def read_head(source: Readable, size: int) -> bytes:
    """Read up to `size` bytes; unlike one `read`, keeps going after short reads."""
    parts: list[bytes] = []
    remaining = size
    while remaining > 0:
        chunk = source.read(remaining)
        if not chunk:
            break
        parts.append(chunk)
        remaining -= len(chunk)
    return b"".join(parts)


class _ReplayRaw(io.RawIOBase):
    """Raw stream that first replays an already-read head, then continues with the source."""

    def __init__(self, head: bytes, source: Readable) -> None:
        self._head = head
        self._source = source
        self._position = 0

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer: WriteableBuffer) -> int:
        size = len(memoryview(buffer))
        if self._position < len(self._head):
            data = self._head[self._position : self._position + size]
        else:
            data = self._source.read(size) or b""
        memoryview(buffer)[: len(data)] = data
        self._position += len(data)
        return len(data)


class _GunzipRaw(io.RawIOBase):
    """Raw stream of the decompressed content of a multi-member gzip stream.

    Unlike `gzip.GzipFile`, which raises and drops the data of the read that hit the damage,
    it returns every decompressed byte, then ends and records the damage in `damage`.
    """

    def __init__(self, compressed: _ReplayRaw) -> None:
        self._compressed = compressed
        self._decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._pending = b""
        self._pending_at = 0
        self._position = 0
        self._finished = False
        self.damage: StreamDamage | None = None
        # Where each gzip member starts: in the decompressed data and in the compressed bytes.
        self._member_content_starts = [0]
        self._member_compressed_starts = [0]

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def member_start(self, offset: int) -> int:
        """The compressed offset of the gzip member holding decompressed byte `offset`."""
        i = bisect.bisect_right(self._member_content_starts, offset) - 1
        return self._member_compressed_starts[max(i, 0)]

    def readinto(self, buffer: WriteableBuffer) -> int:
        while self._pending_at >= len(self._pending):
            if self._finished:
                return 0
            self._inflate_more()
        view = memoryview(buffer)
        size = min(len(view), len(self._pending) - self._pending_at)
        view[:size] = self._pending[self._pending_at : self._pending_at + size]
        self._pending_at += size
        self._position += size
        return size

    def _inflate_more(self) -> None:
        if self._decompressor.eof:
            self._start_next_member()
            return
        data = self._decompressor.unconsumed_tail or self._read_compressed()
        if not data:
            self._fail(True, "the gzip stream ends before its end-of-stream marker")
            return
        self._inflate(data)

    def _start_next_member(self) -> None:
        data = self._decompressor.unused_data.lstrip(b"\x00")  # zero padding is allowed
        while not data:
            data = self._read_compressed()
            if not data:
                self._finished = True  # clean end after a complete member
                return
            data = data.lstrip(b"\x00")
        # Every earlier member's output was handed out: the new member starts here.
        self._member_content_starts.append(self._position)
        self._member_compressed_starts.append(self._compressed.tell() - len(data))
        self._decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._inflate(data)

    def _inflate(self, data: bytes) -> None:
        try:
            self._pending = self._decompressor.decompress(data, _INFLATE_CHUNK)
        except zlib.error as exc:
            self._fail(False, f"corrupt gzip data: {exc}")
            return
        self._pending_at = 0

    def _read_compressed(self) -> bytes:
        buffer = bytearray(_BUFFER_BYTES)
        size = self._compressed.readinto(buffer)
        return bytes(buffer[:size])

    def _fail(self, truncated: bool, detail: str) -> None:
        where = f"after {self._compressed.tell()} compressed bytes"
        self.damage = StreamDamage(truncated, f"{detail} ({where})")
        self._finished = True


class ContentStream:
    """The readable content of one landed file: `read`, `readline` and `tell` (decompressed)."""

    def __init__(self, head: bytes, source: Readable, *, gzipped: bool) -> None:
        """`head` is what was already read from `source` to sniff the file."""
        self.gzipped = gzipped
        replay = _ReplayRaw(head, source)
        self._gunzip = _GunzipRaw(replay) if gzipped else None
        self._buffer = io.BufferedReader(self._gunzip or replay, _BUFFER_BYTES)

    def read(self, size: int = -1) -> bytes:
        """Read up to `size` bytes (all remaining bytes if negative); b"" at the end."""
        return self._buffer.read(size)

    def readline(self, size: int = -1) -> bytes:
        """Read one line, at most `size` bytes; b"" at the end."""
        return self._buffer.readline(size)

    def tell(self) -> int:
        """Bytes of content read so far."""
        return self._buffer.tell()

    def at_end(self) -> bool:
        """True when no content is left (without consuming any)."""
        return not self._buffer.peek(1)

    @property
    def damage(self) -> StreamDamage | None:
        """Why the content ended early, once the reader has hit that end; None if it has not."""
        return self._gunzip.damage if self._gunzip else None

    def where(self, offset: int) -> str:
        """Describe a content offset for a human: which bytes of which stream."""
        return f"byte {offset} of the decompressed data" if self.gzipped else f"byte {offset}"

    def origin(self, offset: int) -> int:
        """Where content offset `offset` lies in the bytes read: the offset itself, or for gzip
        data the start of the member holding it (Common Crawl writes a member per record, so
        this is the offset its indexes give)."""
        return self._gunzip.member_start(offset) if self._gunzip else offset

    def read_limited(self, limit: int) -> bytes | None:
        """Read everything left, or return None as soon as it exceeds `limit` bytes."""
        # BytesIO hands its buffer to getvalue() without a copy: peak memory is one copy of
        # the data.
        collected = io.BytesIO()
        while chunk := self._buffer.read(min(_INFLATE_CHUNK, limit + 1 - collected.tell())):
            collected.write(chunk)
            if collected.tell() > limit:
                return None
        return collected.getvalue()


class ResumedContent(ContentStream):
    """The content of a file from offset `start` on, for a reader that takes over mid-file.

    `kept` holds the bytes from `start` up to where `rest` stands (an earlier reader consumed
    them); reading continues with `rest`. `tell` counts from `start`; `where` and `damage`
    describe the whole file, so reasons name the same bytes as a reader that started at 0.
    """

    def __init__(self, kept: bytes, start: int, rest: ContentStream) -> None:
        super().__init__(kept, rest, gzipped=False)
        self.gzipped = rest.gzipped
        self._rest = rest
        self._start = start

    @property
    def damage(self) -> StreamDamage | None:
        return self._rest.damage

    def where(self, offset: int) -> str:
        return self._rest.where(self._start + offset)

    def origin(self, offset: int) -> int:
        return self._rest.origin(self._start + offset)
