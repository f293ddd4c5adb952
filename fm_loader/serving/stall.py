"""The stall diagnostic: is the trainer waiting for data, or is data waiting for the trainer?

    report = probe(dataset, step=train_step, steps=200, num_workers=2)   # or step=0.05 (seconds)
    print(report.verdict())      # "loader-bound: ..." or "trainer-bound: ..."

Runs a trainer-shaped loop twice on the same steps: once with the real loader (`make_loader`),
once with one real batch served from memory, so the step does all its own work and no loading
at all. The first says how long a step takes and how much of it is spent waiting for the next
batch (the stall fraction); the second what a step would take if data were free. When the real
loop stalls more than `STALL_BOUND` of its time, the loader is the bottleneck; otherwise the
trainer is, and the loader's headroom is how much faster than the trainer it could go.

`step` is the trainer's own step function (given the batch), or a number of seconds: then each
step copies the batch's training tensors (the host side of a copy to the accelerator) and
sleeps the rest of that time, as a host waiting on its accelerator does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from fm_loader.serving.loader import Served, make_loader
from fm_loader.serving.metrics import STALL_BOUND

Batch = dict[str, Any]
_TRAINING = ("input_ids", "labels", "loss_mask", "position_ids")


@dataclass(frozen=True)
class LoopFigures:
    """One loop's per-step figures (after its warm-up steps)."""

    steps: int
    step_s: float  # mean wall time per step
    wait_s: float  # mean time per step waiting for the batch
    samples_per_s: float
    tokens_per_s: float  # real (non-padding) tokens

    @property
    def stall_fraction(self) -> float:
        return self.wait_s / self.step_s if self.step_s > 0 else 0.0


@dataclass(frozen=True)
class ProbeReport:
    """The real loop next to the loop with data for free, and which side sets the pace."""

    real: LoopFigures
    synthetic: LoopFigures
    num_workers: int
    batch_size: int
    loader_metrics: dict[str, float]  # the real loop's `LoaderMetrics.snapshot()`

    @property
    def bottleneck(self) -> str:
        """ "loader" when the real loop waits for data more than STALL_BOUND of its time."""
        return "loader" if self.real.stall_fraction > STALL_BOUND else "trainer"

    @property
    def slowdown(self) -> float:
        """Real step time over the step time with data for free (1.0: the loader costs nothing)."""
        return self.real.step_s / self.synthetic.step_s if self.synthetic.step_s > 0 else 0.0

    def verdict(self) -> str:
        if self.bottleneck == "loader":
            return (
                f"loader-bound: the trainer waits {self.real.stall_fraction:.0%} of each step "
                f"for data; steps take {self.slowdown:.2f}x as long as with data for free. More "
                "workers, a warm cache (fm cache prewarm) or a larger prefetch would help"
            )
        return (
            f"trainer-bound: the trainer waits {self.real.stall_fraction:.1%} of each step for "
            f"data; steps take {self.slowdown:.2f}x as long as with data for free"
        )

    def rows(self) -> list[tuple[str, str, str]]:
        """(figure, real loader, data from memory) for a table."""
        r, s = self.real, self.synthetic
        return [
            ("step time (ms)", f"{r.step_s * 1e3:.2f}", f"{s.step_s * 1e3:.2f}"),
            ("waiting for data (ms/step)", f"{r.wait_s * 1e3:.2f}", f"{s.wait_s * 1e3:.2f}"),
            ("stall fraction", f"{r.stall_fraction:.1%}", f"{s.stall_fraction:.1%}"),
            ("samples/s", f"{r.samples_per_s:,.0f}", f"{s.samples_per_s:,.0f}"),
            ("tokens/s", f"{r.tokens_per_s:,.0f}", f"{s.tokens_per_s:,.0f}"),
        ]


def accelerator_step(seconds: float) -> Callable[[Batch], None]:
    """A step that copies the batch's training tensors and idles the rest of `seconds`."""

    def step(batch: Batch) -> None:
        started = time.perf_counter()
        for name in _TRAINING:
            batch[name].clone()
        left = seconds - (time.perf_counter() - started)
        if left > 0:
            time.sleep(left)

    return step


def probe(
    dataset: Served,
    *,
    step: Callable[[Batch], Any] | float = 0.05,
    steps: int = 100,
    warmup_steps: int = 5,
    batch_size: int | None = None,
    num_workers: int = 2,
    prefetch_batches: int = 4,
    **loader_options: Any,
) -> ProbeReport:
    """Time `steps` trainer steps fed by `make_loader(dataset, ...)`, then the same steps fed
    one of its batches from memory; see the module docstring.

    The first `warmup_steps` of each loop (workers starting, shards mapped and checked) are run
    but not counted. The real loop reads from the dataset's current position and does not move
    it. Raises ValueError when the epoch has fewer than `warmup_steps + steps` batches left.
    """
    if steps < 1 or warmup_steps < 0:
        raise ValueError(
            f"steps must be positive and warmup_steps non-negative, got {steps}, {warmup_steps}"
        )
    run_step = accelerator_step(step) if isinstance(step, int | float) else step
    loader = make_loader(
        dataset,
        batch_size=batch_size,
        num_workers=num_workers,
        prefetch_batches=prefetch_batches,
        **loader_options,
    )
    if len(loader) < warmup_steps + steps:
        raise ValueError(
            f"the dataset has {len(loader)} batches left in this epoch, the probe needs "
            f"{warmup_steps + steps}: ask for fewer steps or a smaller batch_size"
        )
    state = dataset.tracker().state_dict()  # where it stands: restored at the end
    template: Batch | None = None
    batches = iter(loader)
    try:
        for _ in range(warmup_steps):
            run_step(next(batches))
        waits_before = loader.metrics.wait_s
        samples = tokens = 0
        copying = 0.0  # taking the synthetic loop's batch is the probe's work, not the loop's
        started = time.perf_counter()
        for _ in range(steps):
            batch = next(batches)
            if template is None:  # one real batch, owned by us, for the synthetic loop
                copy_started = time.perf_counter()
                template = {k: v.clone() if torch.is_tensor(v) else v for k, v in batch.items()}
                copying = time.perf_counter() - copy_started
            samples += len(batch["sample_index"])
            tokens += int(batch["num_tokens"].sum())
            run_step(batch)
            del batch
        real_wall = time.perf_counter() - started - copying
        real_wait = loader.metrics.wait_s - waits_before
    finally:
        batches.close()  # type: ignore[attr-defined]  # a generator: stops the workers
    dataset.load_state_dict(state)  # the probe leaves the dataset where it found it
    if template is None:
        raise RuntimeError("the probe's loop took no batch")
    real = LoopFigures(
        steps, real_wall / steps, real_wait / steps, samples / real_wall, tokens / real_wall
    )
    synthetic = _from_memory(template, run_step, steps, warmup_steps)
    loader.metrics.synthetic_step_s = synthetic.step_s
    return ProbeReport(real, synthetic, num_workers, loader.batch_size, loader.metrics.snapshot())


def _from_memory(
    template: Batch, run_step: Callable[[Batch], Any], steps: int, warmup_steps: int
) -> LoopFigures:
    """The same loop with the batch already in memory: each step gets a fresh dict of it."""
    samples = len(template["sample_index"])
    tokens = int(template["num_tokens"].sum())
    for _ in range(warmup_steps):
        run_step(dict(template))
    waited = 0.0
    started = time.perf_counter()
    for _ in range(steps):
        asked = time.perf_counter()
        batch = dict(template)
        waited += time.perf_counter() - asked
        run_step(batch)
    wall = time.perf_counter() - started
    return LoopFigures(
        steps, wall / steps, waited / steps, samples * steps / wall, tokens * steps / wall
    )
