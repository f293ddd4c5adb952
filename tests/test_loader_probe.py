"""The stall diagnostic: `fm_loader.probe`, its figures in LoaderMetrics, and `fm loader probe`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fm_loader import make_dataset, make_loader, probe
from fm_loader.serving.metrics import STALL_BOUND
from tests.paths import REPO
from tests.shard_sets import Built, SetShape


@pytest.fixture(scope="module")
def set_shape() -> SetShape:
    return SetShape(seq_len=64, shard_bytes=64 << 10)


def test_a_slow_trainer_is_the_bottleneck_and_the_dataset_does_not_move(web: Built) -> None:
    dataset = make_dataset(str(web.directory), seed=2)
    before = dataset.state_dict()
    # A step of 0.2 s: the loader needs a few ms a batch, so it keeps up with room to spare
    # even when other work on a loaded machine delays a worker by tens of ms (at 0.05 s a step,
    # one 20 ms hiccup over 8 steps read as loader-bound on a busy CI machine).
    report = probe(dataset, step=0.2, steps=8, warmup_steps=3, batch_size=4, num_workers=2)
    assert report.bottleneck == "trainer" and report.verdict().startswith("trainer-bound")
    # Both loops take at least the step's 200 ms; the loader keeps up, so they are close.
    assert report.real.step_s >= 0.2 and report.synthetic.step_s >= 0.2
    assert report.real.stall_fraction < 0.05 and report.synthetic.wait_s < 0.001
    assert report.real.samples_per_s == pytest.approx(4 / report.real.step_s, rel=0.05)
    figures = report.loader_metrics  # the same figures a trainer logs from loader.metrics
    assert figures["synthetic_step_s"] == report.synthetic.step_s
    assert figures["trainer_per_step_s"] >= 0.18
    assert dataset.state_dict() == before


def test_a_trainer_that_does_nothing_waits_for_the_loader(web: Built) -> None:
    def nothing(batch: dict[str, Any]) -> None:
        return None

    dataset = make_dataset(str(web.directory))
    report = probe(dataset, step=nothing, steps=100, warmup_steps=2, batch_size=4, num_workers=0)
    assert report.bottleneck == "loader" and report.verdict().startswith("loader-bound")
    # Well above the bound, not near 1: the probe's own count of samples and tokens (~0.1 ms a
    # step) is trainer time beside the in-process hand-over (~0.2 ms); measured 0.51-0.83 here.
    assert report.real.stall_fraction > 5 * STALL_BOUND, report.real
    assert report.slowdown > 1


def test_loader_metrics_split_each_step_into_wait_and_trainer_time(web: Built) -> None:
    import time

    loader = make_loader(make_dataset(str(web.directory)), batch_size=4, num_workers=1)
    for i, _ in enumerate(loader):
        time.sleep(0.02)
        if i == 5:
            break
    figures = loader.metrics.snapshot()
    assert figures["trainer_per_step_s"] >= 0.015
    assert figures["step_s"] >= figures["wait_per_step_s"] + figures["trainer_per_step_s"] * 0.9
    assert loader.metrics.bottleneck() in ("loader", "trainer")


def test_a_probe_longer_than_the_epoch_is_refused(web: Built) -> None:
    with pytest.raises(ValueError, match=r"batches left in this epoch, the probe needs"):
        probe(make_dataset(str(web.directory)), steps=10_000, batch_size=4, num_workers=0)


def test_fm_loader_probe_prints_both_loops_and_the_verdict(web: Built, tmp_path: Path) -> None:
    command = [
        str(Path(sys.executable).with_name("fm")),
        *("loader", "probe", str(web.directory), "--steps", "6", "--step-ms", "50"),
        *("--batch-size", "4", "--num-workers", "1"),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "FM_HOME": str(tmp_path / "fm")}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1] == "figure\treal loader\tdata from memory"
    names = [line.split("\t")[0] for line in lines[2:7]]
    assert names == [
        "step time (ms)",
        "waiting for data (ms/step)",
        "stall fraction",
        "samples/s",
        "tokens/s",
    ]
    assert lines[7] == "bottleneck: trainer" and lines[8].startswith("trainer-bound")


def test_every_public_name_is_what_it_names_whatever_was_imported_first() -> None:
    """Importing a submodule sets it as an attribute of the package: a public function named
    like its own module (`fm_loader.probe` in probe.py) would then be shadowed by the module."""
    import importlib
    import pkgutil
    import types

    import fm_loader

    for module in pkgutil.iter_modules(fm_loader.__path__):
        importlib.import_module(f"fm_loader.{module.name}")
    shadowed = [n for n in fm_loader.__all__ if isinstance(getattr(fm_loader, n), types.ModuleType)]
    assert shadowed == []
    assert callable(fm_loader.probe) and callable(fm_loader.prewarm)
