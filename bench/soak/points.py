"""The report's arithmetic: which batches stand for each reporting point, their median and
range, the growth ratio against the goal, and the least-squares slope of a per-batch figure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench.harness import median

FULL_POINTS = (10, 100, 250, 500)
QUICK_POINTS = (2, 10, 20)
WINDOW = 10  # batches summarised at each point
GOAL_RATIO = 1.15  # the last point's median over the first's


def points_for(batches: int, quick: bool) -> tuple[int, ...]:
    """The reporting points of a run of `batches`: the standard ones that fit, and the last
    batch when it is not one of them."""
    if batches < 1:
        raise ValueError(f"--batches must be at least 1, not {batches}")
    kept = [p for p in (QUICK_POINTS if quick else FULL_POINTS) if p <= batches]
    if not kept or kept[-1] != batches:
        kept.append(batches)
    return tuple(kept)


def window(point: int, size: int = WINDOW) -> range:
    """The batches (1-based) summarised at `point`: the `size` batches ending at it.

    Windows end at their point rather than straddle it: the last point has no batch after it,
    and maintenance runs right after each point, so every window is measured alike, on a
    catalog last maintained at the previous point.
    """
    if point < 1 or size < 1:
        raise ValueError(f"a point ({point}) and a window ({size}) must be at least 1")
    return range(max(1, point - size + 1), point + 1)


@dataclass(frozen=True)
class Summary:
    """A figure over one window: median, min, max and how many batches."""

    median: float
    low: float
    high: float
    count: int

    def show(self, fmt: str = ".2f") -> str:
        """'median (min–max)', as the other benchmarks write it."""
        if self.count == 1:
            return f"{self.median:{fmt}}"
        return f"{self.median:{fmt}} ({self.low:{fmt}}–{self.high:{fmt}})"


def summarise(per_batch: Sequence[float], point: int, size: int = WINDOW) -> Summary:
    """The window of `point` over `per_batch` (index 0 is batch 1)."""
    batches = window(point, size)
    if batches.stop - 1 > len(per_batch):
        raise ValueError(f"point {point} is past the {len(per_batch)} batches measured")
    values = [per_batch[b - 1] for b in batches]
    return Summary(median(values), min(values), max(values), len(values))


def ratio(last: Summary, first: Summary) -> float:
    """The last point's median over the first's."""
    if first.median <= 0:
        raise ValueError("the first point's median is not positive: no ratio")
    return last.median / first.median


def slope(per_batch: Sequence[float]) -> float:
    """Least-squares slope of the figure against the batch number (per batch)."""
    n = len(per_batch)
    if n < 2:
        return 0.0
    mean_x = (n + 1) / 2
    mean_y = sum(per_batch) / n
    num = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(per_batch, start=1))
    den = sum((x - mean_x) ** 2 for x in range(1, n + 1))
    return num / den
