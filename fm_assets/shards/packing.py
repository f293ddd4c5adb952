"""Best-fit-decreasing packing of tokenized documents into fixed-length training sequences.

Pure functions over (doc_id, num_tokens) pairs: no I/O, no tokens. The shard writer later fills each
`PackedSequence` with the token slices its segments name.

Algorithm (O(n log n) in the number of pieces):
1. Split each document longer than `seq_len` into full `seq_len` chunks plus a remainder piece.
2. Order pieces longest first, ties by (doc_id, doc_offset), so the result does not depend on the
   input order of equal-length pieces.
3. Place each piece into the open sequence with the least remaining room that still fits it; open
   a new sequence when none fits. Open sequences sit in buckets indexed by remaining room, and a
   sorted list of the non-empty room values finds the best bucket with one bisection.
4. Optionally shuffle the finished sequences with a seeded, version-stable RNG so shards are not
   sorted by length (BFD creates long-document sequences first).
"""

from __future__ import annotations

import gc
from bisect import bisect_left, insort
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class Segment:
    """A contiguous slice of one document inside a packed sequence."""

    doc_id: str  # 64-hex sha256 of the raw document
    doc_offset: int  # token offset of this slice inside the document
    length: int  # tokens


@dataclass(frozen=True, slots=True)
class PackedSequence:
    """Segments in placement order; their token slices are concatenated to form the sample."""

    segments: tuple[Segment, ...]

    @property
    def num_tokens(self) -> int:
        """Real (non-padding) tokens in this sequence."""
        return sum(s.length for s in self.segments)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while we allocate millions of small acyclic objects.

    Each generation-0 collection rescans the young objects, and the full collections it triggers
    rescan all of them: with GC on, packing 1M documents took several times longer.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _stable_permutation(n: int, seed: int) -> npt.NDArray[np.intp]:
    """A permutation of range(n) that is identical on every platform and numpy version.

    NumPy only promises a stable stream for the raw bit generator, not for `shuffle`/`permutation`
    (NEP 19), so we sort raw PCG64 draws instead of calling those.
    """
    keys = np.random.PCG64(np.random.SeedSequence(seed)).random_raw(n)
    return np.argsort(keys, kind="stable")


def _validate(doc_ids: list[str], counts: npt.NDArray[np.int64]) -> None:
    """Reject negative token counts and repeated doc ids, naming the offending document."""
    if counts.size and counts.min() < 0:
        bad = int(np.argmin(counts))
        raise ValueError(f"document {doc_ids[bad]} has a negative token count ({counts[bad]})")
    if len(set(doc_ids)) == len(doc_ids):
        return
    # A packed sample names its documents by id; a repeated id would make the token slices
    # ambiguous. Up-weighting belongs to the loader's mixture, not to the packer.
    seen: set[str] = set()
    for doc_id in doc_ids:
        if doc_id in seen:
            raise ValueError(f"document {doc_id} appears twice in the packing input")
        seen.add(doc_id)


def _best_fit(lengths: list[int], seq_len: int, first_bin: int) -> tuple[list[int], int]:
    """Assign pieces (longest first) to bins best-fit; return each piece's bin and the bin count.

    buckets[r] holds the open bins with exactly r tokens of room; `rooms` is the sorted list of
    non-empty r, so the best fit is one bisection away and a whole step is O(log seq_len).
    """
    buckets: list[list[int]] = [[] for _ in range(seq_len + 1)]
    rooms: list[int] = []
    assignment: list[int] = []
    num_bins = first_bin
    for length in lengths:
        i = bisect_left(rooms, length)
        if i == len(rooms):
            index = num_bins
            num_bins += 1
            room = seq_len - length
        else:
            old_room = rooms[i]
            bucket = buckets[old_room]
            index = bucket.pop()
            if not bucket:
                del rooms[i]
            room = old_room - length
        assignment.append(index)
        if room:
            bucket = buckets[room]
            if not bucket:
                insort(rooms, room)
            bucket.append(index)
    return assignment, num_bins


def pack_documents(
    docs: Sequence[tuple[str, int]], seq_len: int, *, shuffle_seed: int | None = None
) -> list[PackedSequence]:
    """Pack documents into sequences of at most `seq_len` tokens, best-fit-decreasing.

    `docs` holds (doc_id, num_tokens) in a deterministic order; doc ids must be unique and empty
    documents are skipped. Every token of every document lands in exactly one segment. With
    `shuffle_seed` the sequences come back in a seeded random order; with None, in creation order.
    """
    if seq_len <= 0:
        raise ValueError(f"seq_len must be positive, got {seq_len}")
    with _gc_paused():
        doc_ids = [doc_id for doc_id, _ in docs]
        counts = np.fromiter((n for _, n in docs), dtype=np.int64, count=len(docs))
        _validate(doc_ids, counts)
        # Ties between equal-length pieces break by doc_id, so visit documents in id order.
        # (Python's sort on str keys beats numpy's argsort on an object array.)
        by_id = np.fromiter(
            sorted(range(len(doc_ids)), key=doc_ids.__getitem__), dtype=np.int64, count=len(docs)
        )
        num_full, remainder = np.divmod(counts[by_id], seq_len)

        # Full chunks are the longest pieces: BFD opens one sequence for each, first, in
        # (doc_id, offset) order.
        full_docs = np.repeat(by_id, num_full)
        full_offsets = (
            np.arange(full_docs.size) - np.repeat(np.cumsum(num_full) - num_full, num_full)
        ) * seq_len
        # Each document has at most one remainder piece, so (doc_id, offset) ties reduce to
        # doc_id order, which a stable sort by length keeps.
        has_rest = remainder > 0
        order = np.argsort(-remainder[has_rest], kind="stable")
        rest_docs = by_id[has_rest][order]
        rest_lengths = remainder[has_rest][order]
        rest_offsets = (num_full[has_rest] * seq_len)[order]

        assignment, num_bins = _best_fit(rest_lengths.tolist(), seq_len, first_bin=full_docs.size)

        # Group pieces by sequence, keeping placement order inside each sequence.
        piece_docs = np.concatenate([full_docs, rest_docs])
        piece_offsets = np.concatenate([full_offsets, rest_offsets])
        piece_lengths = np.concatenate([np.full(full_docs.size, seq_len), rest_lengths])
        piece_bins = np.concatenate([np.arange(full_docs.size), np.asarray(assignment, np.int64)])
        grouped = np.argsort(piece_bins, kind="stable")
        segments = list(
            map(
                Segment,
                list(map(doc_ids.__getitem__, piece_docs[grouped].tolist())),
                piece_offsets[grouped].tolist(),
                piece_lengths[grouped].tolist(),
            )
        )
        bounds = np.searchsorted(piece_bins[grouped], np.arange(num_bins + 1)).tolist()
        sequences = [PackedSequence(tuple(segments[a:b])) for a, b in pairwise(bounds)]
        if shuffle_seed is not None:
            sequences = [sequences[i] for i in _stable_permutation(num_bins, shuffle_seed).tolist()]
    return sequences


def packing_efficiency(sequences: Sequence[PackedSequence], seq_len: int) -> float:
    """Share of token slots holding real tokens: sum(num_tokens) / (len(sequences) * seq_len)."""
    if not sequences:
        return 0.0
    return sum(s.num_tokens for s in sequences) / (len(sequences) * seq_len)
