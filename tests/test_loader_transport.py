"""Loader workers handing batches over through shared memory: contents, ownership, failures."""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from fm_loader import make_dataset, make_loader
from tests import spawn_probe
from tests.shard_sets import Built, SetShape

TENSORS = ("input_ids", "labels", "loss_mask", "position_ids", "cu_seqlens", "sample_index")


@pytest.fixture(scope="module")
def set_shape() -> SetShape:
    return SetShape(seq_len=64, shard_bytes=64 << 10)


def same_batches(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        for key in TENSORS:
            assert torch.equal(x[key], y[key]), key
        assert x["doc_ids"] == y["doc_ids"] and x["max_seqlen"] == y["max_seqlen"]


def test_batches_kept_by_the_trainer_are_never_overwritten(web: Built, code: Built) -> None:
    """`list(loader)` holds every batch: the first ones lent from the workers' slots, the rest
    copied, none reused under the trainer's feet."""
    mixture = {str(web.directory): 0.5, str(code.directory): 0.5}
    reference = list(make_loader(make_dataset(mixture, seed=1), batch_size=4))
    for workers in (1, 2, 3):
        kept = list(make_loader(make_dataset(mixture, seed=1), batch_size=4, num_workers=workers))
        same_batches(kept, reference)


def test_a_trainer_that_drops_each_batch_gets_the_same_stream(web: Built) -> None:
    reference = [
        b["input_ids"].clone() for b in make_loader(make_dataset(str(web.directory)), batch_size=2)
    ]
    got = []
    for batch in make_loader(make_dataset(str(web.directory)), batch_size=2, num_workers=2):
        got.append(batch["input_ids"].clone())
        del batch  # the slot goes back to its worker here
    assert len(got) == len(reference)
    assert all(torch.equal(x, y) for x, y in zip(got, reference, strict=True))


def test_spawned_workers_import_only_the_loader(web: Built, tmp_path: Path) -> None:
    probe = str(tmp_path / "modules")
    loader = make_loader(
        make_dataset(str(web.directory), seed=3),
        batch_size=4,
        num_workers=2,
        multiprocessing_context="spawn",
        worker_init_fn=functools.partial(spawn_probe.record, probe),
    )
    batches = list(loader)
    same_batches(batches, list(make_loader(make_dataset(str(web.directory), seed=3), batch_size=4)))
    for worker in (0, 1):
        imported = set(json.loads(Path(f"{probe}-{worker}.json").read_text()))
        assert {"torch", "fm_loader"} <= imported
        # Neither the platform nor its orchestrators, nor mosaicml-streaming (10-16 s).
        assert imported.isdisjoint({"fm_assets", "dagster", "ray", "streaming"}), imported


def test_pinned_memory_without_an_accelerator_warns_and_serves(web: Built) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: pinned memory is used, nothing to warn about")
    with pytest.warns(UserWarning, match="no CUDA device"):
        loader = make_loader(make_dataset(str(web.directory)), batch_size=4, pin_memory=True)
    assert sum(len(b["sample_index"]) for b in loader) == web.num_samples


def test_a_corrupt_shard_in_a_worker_raises_naming_it(web: Built, tmp_path: Path) -> None:
    directory = Path(shutil.copytree(web.directory, tmp_path / "copy"))
    victim = web.manifest.shards[-1].name
    data = bytearray((directory / victim).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (directory / victim).write_bytes(bytes(data))
    loader = make_loader(make_dataset(str(directory)), batch_size=4, num_workers=2)
    with pytest.raises(ValueError, match=rf"(?s)shard {victim} .*checksum.*in loader worker"):
        list(loader)
    assert multiprocessing.active_children() == []


def _die(worker_id: int) -> None:
    if worker_id == 1:
        os._exit(7)  # as the OOM killer would: no exception, no cleanup


def test_a_worker_that_dies_is_named_with_its_exit_code(web: Built) -> None:
    loader = make_loader(
        make_dataset(str(web.directory)), batch_size=4, num_workers=2, worker_init_fn=_die
    )
    with pytest.raises(RuntimeError, match=r"loader worker 1 .*died with exit code 7"):
        list(loader)
    assert multiprocessing.active_children() == []


def test_stopping_early_stops_the_workers(web: Built) -> None:
    loader = make_loader(make_dataset(str(web.directory)), batch_size=2, num_workers=2)
    batches = iter(loader)
    first = [next(batches) for _ in range(3)]
    batches.close()  # what a `break` out of the loop does
    assert multiprocessing.active_children() == []
    assert loader.state_dict()["position"] == sum(len(b["sample_index"]) for b in first)
