"""Best-fit-decreasing packing: completeness, capacity, determinism, efficiency."""

from __future__ import annotations

import hashlib
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fm_assets.shards.packing import PackedSequence, Segment, pack_documents, packing_efficiency


def doc_id(i: int) -> str:
    return hashlib.sha256(f"doc-{i}".encode()).hexdigest()


def lognormal_docs(
    n: int, seed: int = 0, mean: float = 6.0, sigma: float = 1.2
) -> list[tuple[str, int]]:
    lengths = np.random.default_rng(seed).lognormal(mean, sigma, n).astype(int) + 1
    return [(doc_id(i), int(length)) for i, length in enumerate(lengths)]


def assert_exact_cover(
    docs: list[tuple[str, int]], seqs: list[PackedSequence], seq_len: int
) -> None:
    """Every token of every document appears in exactly one segment; no sequence overflows."""
    covered: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for seq in seqs:
        assert 0 < seq.num_tokens <= seq_len
        for seg in seq.segments:
            assert seg.length > 0
            covered[seg.doc_id].append((seg.doc_offset, seg.length))
    expected = {d: n for d, n in docs if n > 0}
    assert set(covered) == set(expected)
    for d, pieces in covered.items():
        position = 0
        for offset, length in sorted(pieces):
            assert offset == position, f"gap or overlap in {d}"
            position += length
        assert position == expected[d]


doc_lists = st.lists(
    st.tuples(st.integers(0, 10_000), st.integers(0, 300)),
    max_size=60,
    unique_by=lambda t: t[0],
).map(lambda items: [(doc_id(i), n) for i, n in items])


@settings(max_examples=200, deadline=None)
@given(docs=doc_lists, seq_len=st.integers(1, 128), seed=st.none() | st.integers(0, 2**32))
def test_every_token_exactly_once_and_no_overflow(
    docs: list[tuple[str, int]], seq_len: int, seed: int | None
) -> None:
    seqs = pack_documents(docs, seq_len, shuffle_seed=seed)
    assert_exact_cover(docs, seqs, seq_len)


@settings(max_examples=100, deadline=None)
@given(docs=doc_lists, seq_len=st.integers(1, 64))
def test_output_does_not_depend_on_input_order(docs: list[tuple[str, int]], seq_len: int) -> None:
    assert pack_documents(docs, seq_len) == pack_documents(list(reversed(docs)), seq_len)


@settings(max_examples=100, deadline=None)
@given(docs=doc_lists, seq_len=st.integers(8, 64))
def test_best_fit_never_leaves_a_fitting_piece_in_a_new_sequence(
    docs: list[tuple[str, int]], seq_len: int
) -> None:
    """BFD invariant: a piece opened a new sequence only if no earlier sequence had room."""
    seqs = pack_documents(docs, seq_len)
    firsts = [seq.segments[0].length for seq in seqs]
    # Rooms only shrink, so at the end each earlier sequence had at most its final room then.
    for k, first in enumerate(firsts):
        if first == seq_len:
            continue
        final_rooms = [seq_len - s.num_tokens for s in seqs[:k]]
        assert all(room < first for room in final_rooms)


def test_long_documents_split_into_full_chunks_plus_remainder() -> None:
    seqs = pack_documents([(doc_id(1), 5000), (doc_id(2), 48)], 2048)
    full = [s for s in seqs if s.num_tokens == 2048 and len(s.segments) == 1]
    assert [s.segments[0].doc_offset for s in full] == [0, 2048]
    rest = [s for s in seqs if s not in full]
    assert rest == [
        PackedSequence((Segment(doc_id(1), 4096, 904), Segment(doc_id(2), 0, 48))),
    ]


def test_best_fit_picks_the_tightest_sequence() -> None:
    # After placing 60 and 50 (rooms 40 and 50), a 40-token piece goes to the room-40 sequence.
    docs = [(doc_id(1), 60), (doc_id(2), 50), (doc_id(3), 40)]
    seqs = pack_documents(docs, 100)
    assert [[s.doc_id for s in seq.segments] for seq in seqs] == [
        [doc_id(1), doc_id(3)],
        [doc_id(2)],
    ]


def test_deterministic_and_seeded_shuffle() -> None:
    docs = lognormal_docs(2_000, seed=1)
    unshuffled = pack_documents(docs, 1024)
    a = pack_documents(docs, 1024, shuffle_seed=7)
    assert a == pack_documents(docs, 1024, shuffle_seed=7)
    assert a != pack_documents(docs, 1024, shuffle_seed=8)
    # Shuffled output is a permutation of the unshuffled list.
    assert sorted(map(repr, a)) == sorted(map(repr, unshuffled))
    # Unshuffled output is length-sorted at the start (full chunks, then the longest pieces);
    # shuffling breaks that so shards are not length-ordered.
    lengths = [s.segments[0].length for s in a[:50]]
    assert lengths != sorted(lengths, reverse=True)


def test_efficiency_on_realistic_lengths() -> None:
    docs = lognormal_docs(5_000, seed=2)
    seqs = pack_documents(docs, 2048, shuffle_seed=0)
    assert_exact_cover(docs, seqs, 2048)
    assert packing_efficiency(seqs, 2048) >= 0.98


def test_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="seq_len"):
        pack_documents([(doc_id(1), 3)], 0)
    with pytest.raises(ValueError, match="negative"):
        pack_documents([(doc_id(1), -3)], 8)
    with pytest.raises(ValueError, match="appears twice"):
        pack_documents([(doc_id(1), 3), (doc_id(1), 4)], 8)
    assert pack_documents([], 8) == []
    assert packing_efficiency([], 8) == 0.0
