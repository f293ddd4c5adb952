"""The loader with real DataLoader worker processes: order, exact checkpoints, metrics, hygiene."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from fm_loader import FmLoader, collate, make_dataset, make_loader
from tests.paths import REPO
from tests.shard_sets import Built, SetShape


@pytest.fixture(scope="module")
def set_shape() -> SetShape:
    # 64-token samples in 64 KB shards: every worker reads several shards.
    return SetShape(seq_len=64, shard_bytes=64 << 10)


def stream(dataset_order: list[dict[str, torch.Tensor]]) -> list[tuple[int, int]]:
    return [
        (int(s), int(i))
        for batch in dataset_order
        for s, i in zip(batch["source"], batch["sample_index"], strict=True)
    ]


def test_workers_hand_over_the_rank_stream_in_order(web: Built, code: Built) -> None:
    mixture = {str(web.directory): 0.6, str(code.directory): 0.4}
    expected = [
        (s["source"], s["sample_index"]) for s in make_dataset(mixture, rank=1, world_size=3)
    ]
    loader = make_loader(make_dataset(mixture, rank=1, world_size=3), batch_size=5, num_workers=2)
    assert stream(list(loader)) == expected


def test_plain_dataloader_with_batch_size_given_to_the_dataset(web: Built) -> None:
    expected = [s["sample_index"] for s in make_dataset(str(web.directory), seed=2)]
    dataset = make_dataset(str(web.directory), seed=2, batch_size=4)
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=3, collate_fn=collate)
    assert [i for b in loader for i in b["sample_index"].tolist()] == expected


def test_loader_batches_equal_collated_samples(web: Built) -> None:
    samples = list(make_dataset(str(web.directory), seed=3))[:6]
    (batch, *_) = make_loader(make_dataset(str(web.directory), seed=3), batch_size=6)
    reference = collate(samples)
    for key in ("input_ids", "labels", "loss_mask", "position_ids", "cu_seqlens", "num_tokens"):
        assert torch.equal(batch[key], reference[key]), key
        assert batch[key].dtype == reference[key].dtype
    assert (
        batch["doc_ids"] == reference["doc_ids"] and batch["max_seqlen"] == reference["max_seqlen"]
    )


def test_checkpoint_with_workers_resumes_exactly_with_another_shape(
    web: Built, code: Built
) -> None:
    mixture = {str(web.directory): 0.5, str(code.directory): 0.5}
    reference = [
        (s["source"], s["sample_index"])
        for s in make_dataset(mixture, seed=9, rank=0, world_size=1)
    ]
    # Job 1: world size 2, 3 workers, stops after 7 steps; rank 0's loader state is the job's.
    served: dict[int, tuple[int, int]] = {}
    states = []
    for rank in range(2):
        loader = make_loader(
            make_dataset(mixture, seed=9, rank=rank, world_size=2), batch_size=4, num_workers=3
        )
        batches = iter(loader)
        taken = [next(batches) for _ in range(7)]
        for k, key in enumerate(stream(taken)):
            served[rank + 2 * k] = key
        states.append(loader.state_dict())
        batches.close()
    assert states[0] == states[1] and states[0]["position"] == 2 * 7 * 4
    # Job 2: one rank, 2 workers, batch size 3, to the end of the epoch.
    loader = make_loader(
        make_dataset(mixture, seed=9, rank=0, world_size=1), batch_size=3, num_workers=2
    )
    loader.load_state_dict(json.loads(json.dumps(states[0])))  # survives a JSON checkpoint
    start = states[0]["position"]
    for k, key in enumerate(stream(list(loader))):
        served[start + k] = key
    assert [served[t] for t in range(len(served))] == reference
    assert loader.state_dict()["position"] == len(reference)


def test_metrics_report_stall_throughput_depth_and_fetches(
    web: Built, caplog: pytest.LogCaptureFixture
) -> None:
    loader = make_loader(
        make_dataset(str(web.directory)), batch_size=8, num_workers=2, log_every_s=0.0
    )
    with caplog.at_level(logging.INFO, logger="fm_loader"):
        batches = list(loader)
    snap = loader.metrics.snapshot()
    assert loader.metrics.samples == web.num_samples == sum(len(b["sample_index"]) for b in batches)
    assert loader.metrics.tokens == web.manifest.num_tokens
    assert 0.0 < snap["stall_fraction"] <= 1.0
    assert snap["samples_per_s"] > 0 and snap["tokens_per_s"] > 0
    assert 0.0 <= snap["prefetch_depth"] <= loader.prefetch_batches
    # Every shard is mapped and verified once in each worker that reads from it.
    assert len(web.manifest.shards) <= snap["shard_fetches"] <= 2 * len(web.manifest.shards)
    assert snap["shard_fetch_max_s"] > 0
    assert any("stall" in r.message and "tokens/s" in r.message for r in caplog.records)


def test_without_workers_batches_are_built_ahead_only_while_the_trainer_idles(
    web: Built,
) -> None:
    """A trainer that only takes batches builds them on its own thread (no hand-off between
    threads to pay: nothing is ever ready ahead); one that idles between batches, as a host
    waiting on its accelerator does, finds them built ahead. The stream is the same."""
    import threading
    import time

    def loader() -> FmLoader:
        return make_loader(make_dataset(str(web.directory), seed=1), batch_size=4)

    expected = [i for b in loader() for i in b["sample_index"].tolist()]
    busy, served, started = loader(), [], set()
    before = set(threading.enumerate())
    for batch in busy:
        served += batch["sample_index"].tolist()
        started |= set(threading.enumerate()) - before
    assert served == expected
    assert not started, started
    assert busy.metrics.snapshot()["prefetch_depth"] == 0

    idle, served = loader(), []
    batches = iter(idle)
    for _ in range(20):
        served += next(batches)["sample_index"].tolist()
        time.sleep(0.02)  # the step: a few ms of work would do, a batch takes well under 1 ms
    served += [i for b in batches for i in b["sample_index"].tolist()]
    assert served == expected
    # Ready ahead when asked for, from the third request on (two steps show the idle time).
    assert idle.metrics.depth_sum >= 18, idle.metrics.snapshot()


TRAINER = textwrap.dedent(
    """
    import hashlib, json, sys
    from fm_loader import make_dataset, make_loader
    source, cache = sys.argv[1], sys.argv[2]
    dataset = make_dataset(source, seed=int(sys.argv[3]), cache_dir=cache)
    digest = hashlib.sha256()
    for batch in make_loader(dataset, batch_size=8, num_workers=2):
        digest.update(batch["input_ids"].numpy().tobytes())
    print(json.dumps({"digest": digest.hexdigest()}))
    """
)


def run_trainers(source: str, cache: Path, seeds: list[int]) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", TRAINER, source, str(cache), str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for seed in seeds
    ]
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
        out.append(json.loads(stdout.strip().splitlines()[-1])["digest"])
    return out


def test_two_trainers_on_one_host_leave_nothing_behind(web: Built, tmp_path: Path) -> None:
    shm_before = set(os.listdir("/dev/shm"))
    cache = tmp_path / "cache"
    # Two concurrent trainers with the same seed get bit-identical batches; another seed differs.
    a, b, c = run_trainers(str(web.directory), cache, [5, 5, 6])
    assert a == b != c
    # ...and a rerun on this host is identical again.
    assert run_trainers(str(web.directory), cache, [5]) == [a]
    # Other tenants of a shared host (a Postgres of another job) come and go in /dev/shm too.
    new = {n for n in set(os.listdir("/dev/shm")) - shm_before if not n.startswith("PostgreSQL.")}
    assert new == set()
    leftovers = [
        p for p in tmp_path.rglob("*") if p.suffix in (".lock", ".tmp") or "tmp-" in p.name
    ]
    assert leftovers == []


def test_the_batch_size_that_places_samples_is_given_once(web: Built) -> None:
    dataset = make_dataset(str(web.directory), seed=4, batch_size=4)
    with pytest.raises(ValueError, match=r"make_loader\(batch_size=8\).*batch_size=4"):
        make_loader(dataset, batch_size=8)
    # Without one, the loader batches as the dataset places its samples.
    loader = make_loader(dataset)
    first = next(iter(loader))
    assert loader.batch_size == 4 and len(first["input_ids"]) == 4


def test_a_dataset_whose_batch_size_was_not_chosen_takes_the_loaders(web: Built) -> None:
    expected = [s["sample_index"] for s in make_dataset(str(web.directory), seed=4)]
    dataset = make_dataset(str(web.directory), seed=4)  # batch_size left out: not chosen
    loader = make_loader(dataset, batch_size=8, num_workers=2)
    batches = list(loader)
    assert loader.batch_size == dataset.batch_size == 8
    assert {len(b["input_ids"]) for b in batches[:-1]} == {8}
    # Two workers took whole batches of 8 in turn: the trainer still got the stream in order.
    assert [i for b in batches for i in b["sample_index"].tolist()] == expected
    # Chosen now: a loader asking for another size is refused, naming both and who chose.
    with pytest.raises(
        ValueError,
        match=r"make_loader\(batch_size=4\).*is 8, chosen by .*make_loader\(batch_size=8\)",
    ):
        make_loader(dataset, batch_size=4)


def test_a_batch_size_chosen_for_the_dataset_is_never_changed_by_the_loader(web: Built) -> None:
    dataset = make_dataset(str(web.directory), seed=4, batch_size=1)  # chosen, if the smallest
    with pytest.raises(ValueError, match=r"make_loader\(batch_size=8\).*batch_size=1\).*once"):
        make_loader(dataset, batch_size=8)
    assert dataset.batch_size == 1
    assert make_loader(dataset, batch_size=1).batch_size == 1
