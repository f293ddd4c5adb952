"""The loader contract, line by line, on shard sets built from the shared WARCs.

Property tests drive random job shapes: world sizes, DataLoader worker counts and batch sizes that
change at every resume. DataLoader workers are emulated in-process with `worker_stream` and the
round-robin hand-over torch uses (whole batches from worker 0, 1, ...), which
test_loader_workers.py checks against real worker processes.
"""

from __future__ import annotations

import shutil
from collections import Counter
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fm_loader.serving.dataset
from fm_loader import Epochs, FmDataset, make_dataset
from fm_loader.order.mixture import MixtureSpec, ScheduleCursor
from fm_loader.order.plan import SourceOrder, permutation
from tests.paths import WGET_WARC_2
from tests.shard_sets import Built, SetShape, build_from_warc

SEQ_LEN = 32
Key = tuple[int, int]  # (source index, sample index)


@pytest.fixture(scope="module")
def set_shape() -> SetShape:
    # 32-token samples and ~40 KB shards: a few thousand real samples over many shards.
    return SetShape(seq_len=SEQ_LEN, shard_bytes=40 << 10)


def keys(samples: list[dict[str, Any]]) -> list[Key]:
    return [(s["source"], s["sample_index"]) for s in samples]


def rank_stream(dataset: FmDataset, num_workers: int, batch_size: int) -> list[dict[str, Any]]:
    """What a DataLoader(batch_size=bs, num_workers=n) hands the trainer, in order."""
    if num_workers == 0:
        return list(dataset)
    workers = [dataset.worker_stream(w, num_workers) for w in range(num_workers)]
    out: list[dict[str, Any]] = []
    live = list(range(num_workers))
    while live:
        for w in list(live):
            batch = [s for _, s in zip(range(batch_size), workers[w], strict=False)]
            out += batch
            if len(batch) < batch_size:
                live.remove(w)
    return out


def run_job(
    source: Any,
    world_size: int,
    num_workers: int,
    batch_size: int,
    steps: int | None,
    state: dict[str, Any] | None,
    **kwargs: Any,
) -> tuple[dict[int, Key], dict[str, Any]]:
    """Run every rank of one job for `steps` lockstep steps (None: to the end of the epoch).

    Returns what was consumed, placed at its global position, and rank 0's state afterwards.
    """
    ranks = []
    for rank in range(world_size):
        dataset = make_dataset(
            source, rank=rank, world_size=world_size, batch_size=batch_size, **kwargs
        )
        if state is not None:
            dataset.load_state_dict(state)
        ranks.append(dataset)
    start = ranks[0].state_dict(consumed_samples=0)["position"]
    lockstep = min(len(d) for d in ranks)
    consumed = lockstep if steps is None else min(steps * batch_size, lockstep)
    placed: dict[int, Key] = {}
    for rank, dataset in enumerate(ranks):
        stream = keys(rank_stream(dataset, num_workers, batch_size))
        take = len(stream) if steps is None else consumed
        for k, key in enumerate(stream[:take]):
            placed[start + rank + k * world_size] = key
    # Run to the end, rank 0 has consumed all it had (ranks may differ by one in the last round).
    final = len(ranks[0]) if steps is None else consumed
    return placed, ranks[0].state_dict(consumed_samples=final)


def reference(source: Any, **kwargs: Any) -> list[Key]:
    return keys(list(make_dataset(source, rank=0, world_size=1, **kwargs)))


JOB = st.tuples(
    st.integers(1, 12),  # world size
    st.integers(0, 3),  # DataLoader workers
    st.integers(1, 8),  # batch size
    st.integers(0, 40),  # steps before the job stops
)
PROPERTY = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


# --- 1 and 2: exactly once, elastic resume ------------------------------------------------------


@PROPERTY
@given(jobs=st.lists(JOB, min_size=1, max_size=4), seed=st.integers(0, 2**32))
def test_exactly_once_through_any_sequence_of_job_shapes(
    web: Built, jobs: list[tuple[int, int, int, int]], seed: int
) -> None:
    source = str(web.directory)
    expected = reference(source, seed=seed, shuffle_window=97)
    assert sorted(expected) == [(0, i) for i in range(web.num_samples)]  # every sample once

    served: dict[int, Key] = {}
    state = None
    for world_size, workers, batch, steps in [*jobs[:-1], (*jobs[-1][:3], None)]:
        placed, state = run_job(
            source, world_size, workers, batch, steps, state, seed=seed, shuffle_window=97
        )
        assert not served.keys() & placed.keys()  # nothing served twice across resumes
        served.update(placed)
    # The whole epoch, assembled from every job, rank and worker: the single-rank stream.
    assert [served[t] for t in range(len(served))] == expected
    assert state is not None and state["position"] == web.num_samples


def test_world_sizes_8_6_12_1_with_changing_workers(web: Built) -> None:
    source, served, state = str(web.directory), {}, None
    for world_size, workers, batch, steps in [
        (8, 2, 4, 5),
        (6, 0, 3, 7),
        (12, 3, 2, 4),
        (1, 1, 8, None),
    ]:
        placed, state = run_job(source, world_size, workers, batch, steps, state, seed=7)
        served.update(placed)
    assert sorted(served.values()) == [(0, i) for i in range(web.num_samples)]
    assert [served[t] for t in range(len(served))] == reference(source, seed=7)


def test_remainder_goes_to_the_first_ranks(web: Built) -> None:
    """No sample dropped or padded: the last round is short, ranks differ by at most one."""
    world_size = 7
    sizes = [len(make_dataset(str(web.directory), rank=r, world_size=world_size)) for r in range(7)]
    base, extra = divmod(web.num_samples, world_size)
    assert sizes == [base + (r < extra) for r in range(world_size)]


@pytest.mark.parametrize("k", [2, 3])
def test_up_weighted_source_is_served_exactly_k_times(web: Built, code: Built, k: int) -> None:
    mixture = {str(web.directory): Epochs(1), str(code.directory): Epochs(k)}
    served, state = {}, None
    for job in [(5, 2, 4, 9), (3, 0, 2, None)]:
        placed, state = run_job(mixture, *job, state, seed=1)
        served.update(placed)
    counts = Counter(served.values())
    assert {key for key, n in counts.items() if key[0] == 0} == {
        (0, i) for i in range(web.num_samples)
    }
    assert set(counts.values()) - {1, k} == set()
    assert all(counts[(1, i)] == k for i in range(code.num_samples))
    assert all(counts[(0, i)] == 1 for i in range(web.num_samples))


# --- 3: mixture per step --------------------------------------------------------------------------


def assert_within_one_of_target(stream: list[int], weights: list[Fraction]) -> None:
    sources = np.asarray(stream)
    for s, w in enumerate(weights):
        counts = np.cumsum(sources == s)
        t = np.arange(1, len(stream) + 1)
        # |count - w t| < 1 in exact arithmetic: w = p / q.
        p, q = w.numerator, w.denominator
        assert np.all(np.abs(counts * q - p * t) < q), f"source {s} strays from {w}"


# Every rank and worker walks the whole schedule: smaller jobs keep this test quick.
SMALL_JOB = st.tuples(st.integers(1, 6), st.integers(0, 2), st.integers(1, 8), st.integers(0, 40))


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    weights=st.lists(st.integers(1, 50), min_size=2, max_size=5),
    jobs=st.lists(SMALL_JOB, min_size=1, max_size=3),
)
def test_every_prefix_within_one_sample_of_its_share(
    web: Built, code: Built, weights: list[int], jobs: list[tuple[int, int, int, int]]
) -> None:
    # Up to five sources (the two sets, repeated under other keys) with random weights.
    sets = [web.directory, code.directory]
    source = {str(sets[i % 2]) + "/." * (i // 2): float(w) for i, w in enumerate(weights)}
    served, state = {}, None
    for world_size, workers, batch, steps in [*jobs[:-1], (*jobs[-1][:3], None)]:
        placed, state = run_job(source, world_size, workers, batch, steps, state, seed=3)
        served.update(placed)
    stream = [served[t][0] for t in range(len(served))]
    total = sum(weights)
    assert_within_one_of_target(stream, [Fraction(w, total) for w in weights])


def test_weights_follow_the_given_shares_and_each_pass_is_a_permutation(
    web: Built, code: Built
) -> None:
    source = {str(web.directory): 0.7, str(code.directory): 0.3}
    stream = reference(source, seed=11)
    assert_within_one_of_target([s for s, _ in stream], [Fraction(7, 10), Fraction(3, 10)])
    # The epoch is the shortest stream in which every source completes a full pass.
    assert len(stream) == max(-(-web.num_samples * 10 // 7), -(-code.num_samples * 10 // 3))
    for s, n in ((0, web.num_samples), (1, code.num_samples)):
        ids = [i for src, i in stream if src == s]
        assert len(ids) >= n
        for start in range(0, len(ids), n):
            one_pass = ids[start : start + n]
            assert len(set(one_pass)) == len(one_pass)  # no repeat inside a pass
            if len(one_pass) == n:
                assert sorted(one_pass) == list(range(n))


def test_quota_schedule_restores_from_any_checkpoint() -> None:
    weights = [5, 3, 2, 7]
    whole, _ = ScheduleCursor(weights).take(1000)
    cursor = ScheduleCursor(weights)
    cursor.take(613)
    resumed = ScheduleCursor(weights, cursor.position, cursor.counts)
    assert resumed.take(387)[0].tolist() == whole[613:].tolist()
    with pytest.raises(ValueError, match="not a position of the schedule"):
        ScheduleCursor(weights, 10, [10, 0, 0, 0])


def test_mixture_arguments_are_validated() -> None:
    assert MixtureSpec.parse({"a@v1": 0.7, "b@v1": 0.3}).weights == ("7/10", "3/10")
    assert MixtureSpec.parse({"a@v1": 2, "b@v1": 6}).weights == ("1/4", "3/4")
    with pytest.raises(ValueError, match="either weights or Epochs"):
        MixtureSpec.parse({"a@v1": 0.5, "b@v1": Epochs(2)})
    with pytest.raises(ValueError, match="positive and finite"):
        MixtureSpec.parse({"a@v1": 0.0})
    with pytest.raises(ValueError, match="positive int"):
        Epochs(0)


# --- 4: shuffle -----------------------------------------------------------------------------------


def test_shards_are_permuted_and_samples_shuffled_within_a_bounded_window(web: Built) -> None:
    sizes = [s.samples for s in web.manifest.shards]
    window = 50
    shards_only = SourceOrder(sizes, seed=3, epoch=0, source=0, window=1)
    windowed = SourceOrder(sizes, seed=3, epoch=0, source=0, window=window)
    running = np.arange(web.num_samples)
    concatenated, shuffled = shards_only.sample_ids(running), windowed.sample_ids(running)
    # Shards in a permuted order, each read whole...
    bounds = np.cumsum([0, *sizes])
    shard_of = np.searchsorted(bounds, concatenated, side="right") - 1
    visits = [int(s) for i, s in enumerate(shard_of) if i == 0 or s != shard_of[i - 1]]
    assert sorted(visits) == list(range(len(sizes))) and visits != sorted(visits)
    # ...and the shuffle never moves a sample out of its window of the concatenation.
    for start in range(0, web.num_samples, window):
        block = slice(start, start + window)
        assert set(shuffled[block]) == set(concatenated[block])
    assert not np.array_equal(shuffled, concatenated)


def test_seed_and_epoch_give_other_orders_and_the_same_ones_repeat(web: Built) -> None:
    source = str(web.directory)
    a = reference(source, seed=1, epoch=0)
    assert a == reference(source, seed=1, epoch=0)
    assert a != reference(source, seed=2, epoch=0)
    assert a != reference(source, seed=1, epoch=1)


def test_orders_are_pinned_across_numpy_versions() -> None:
    """Raw PCG64 draws are stable by NumPy's policy; a change here would reorder every run."""
    assert permutation(10, 1, 2).tolist() == [5, 6, 9, 3, 2, 1, 0, 8, 4, 7]


# --- 5: resume cost -------------------------------------------------------------------------------


def test_resume_work_does_not_grow_with_the_position(
    web: Built, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resuming late steps the schedule no further than resuming early (timed in bench/)."""
    taken: list[int] = []
    original = ScheduleCursor.take
    monkeypatch.setattr(
        ScheduleCursor, "take", lambda self, n: (taken.append(n), original(self, n))[1]
    )
    monkeypatch.setattr(fm_loader.serving.dataset, "_POSITIONS_PER_STEP", 64)
    monkeypatch.setattr(fm_loader.serving.dataset, "_SAMPLES_PER_BLOCK", 1)
    source = {str(web.directory): 0.5, str(web.directory) + "/.": 0.5}
    full = make_dataset(source, rank=0, world_size=1)
    work = {}
    for fraction in (0.0, 0.5, 0.99):
        position = int(full.epoch_length * fraction)
        state = full.state_dict(consumed_samples=position)
        resumed = make_dataset(source, rank=0, world_size=1)
        taken.clear()
        resumed.load_state_dict(state)
        next(iter(resumed))
        work[fraction] = sum(taken)
    assert work[0.99] <= work[0.0] == 64


# --- 6: pinned state ------------------------------------------------------------------------------


def test_state_pins_the_stream_and_names_every_mismatch(
    web: Built, code: Built, tmp_path: Path
) -> None:
    source = {str(web.directory): 0.6, str(code.directory): 0.4}
    dataset = make_dataset(source, seed=4, shuffle_window=64)
    state = dataset.state_dict(consumed_samples=10)
    assert state["position"] == 10 and sum(state["source_counts"]) == 10
    assert state["mixture_weights"] == ["3/5", "2/5"] and state["seq_len"] == SEQ_LEN
    assert state["tokenizer_hash"] == web.manifest.tokenizer_hash
    assert state["schema_fingerprint"] == web.manifest.schema_fingerprint
    for other, match in [
        ({str(web.directory): 0.5, str(code.directory): 0.5}, "mixture_weights"),
        ({str(code.directory): 0.4, str(web.directory): 0.6}, "sources"),
        (str(web.directory), "sources.*mixture_mode"),
    ]:
        with pytest.raises(ValueError, match=match):
            make_dataset(other, seed=4, shuffle_window=64).load_state_dict(state)
    # The same path holding other content (a rebuilt set) is caught by its content hash.
    moved = tmp_path / "web"
    shutil.copytree(web.directory, moved)
    rebuilt = build_from_warc(tmp_path / "rebuilt", WGET_WARC_2, SEQ_LEN, version="web@v1")
    state_moved = make_dataset(str(moved), seed=4, shuffle_window=64).state_dict()
    shutil.rmtree(moved)
    shutil.copytree(rebuilt.directory, moved)
    with pytest.raises(ValueError, match="content_hashes: checkpoint has"):
        make_dataset(str(moved), seed=4, shuffle_window=64).load_state_dict(state_moved)
    with pytest.raises(ValueError, match="plan_version"):
        dataset.load_state_dict({**state, "plan_version": "other"})
    with pytest.raises(ValueError, match="fields"):
        dataset.load_state_dict({**state, "rank": 0})
    with pytest.raises(ValueError, match="not a position of the schedule"):
        dataset.load_state_dict({**state, "source_counts": [10, 0]})
