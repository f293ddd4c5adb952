"""The machine's own two-core ceiling, measured between the scaling runs.

The goal's ideal 2.0× assumes two cores that each run as fast with the other one busy as
alone. A shared virtual machine may not (clock and cache shared with the host's other guests,
the hypervisor's scheduling). So the pipeline's heaviest work, the extract stage's extractor
(`stages.extract.trafilatura_text`) over the article-benchmark pages, runs in one process and
then in two processes at once, with no Ray, no Iceberg and no files written: the best any
scheduler of that work could do on this machine at that moment.
"""

from __future__ import annotations

import gzip
import multiprocessing
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Ceiling:
    """One measurement: the same pages extracted by one process alone, then by two at once."""

    pages: int
    alone_s: float  # one process, the other idle
    together_s: float  # first start to last end of the two processes running at once

    @property
    def speedup(self) -> float:
        """Work done per second by two processes ÷ by one (ideal 2.0)."""
        return 2 * self.alone_s / self.together_s

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _extract_all(paths: Sequence[Path]) -> tuple[float, float]:
    """(start, end) wall-clock times of extracting every page of `paths` (in a pool worker)."""
    from fm_assets.stages.extract import trafilatura_text

    pages = [gzip.decompress(p.read_bytes()).decode("utf-8", "replace") for p in paths]
    start = time.time()
    for html in pages:
        trafilatura_text(html, None)
    return start, time.time()


def measure(paths: Sequence[Path], repeats: int) -> list[Ceiling]:
    """`repeats` measurements, each one process alone then two at once, in two fresh processes
    (spawned: nothing of this process's state) warmed on a few pages first."""
    found = []
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.map(_extract_all, [paths[:4], paths[4:8]], chunksize=1)  # imports, lazy setup
        for _ in range(repeats):
            start, end = pool.apply(_extract_all, (paths,))
            both = pool.map(_extract_all, [paths, paths], chunksize=1)
            together = max(e for _, e in both) - min(s for s, _ in both)
            found.append(Ceiling(len(paths), end - start, together))
    return found
