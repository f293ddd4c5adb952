"""How much a loader benchmark run measures: repeats and sample counts, full and quick."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    """Repeats and sample counts of one run."""

    repeats: int  # figures 1 and 2
    measured_samples: int  # per path per repeat, figure 1
    warm_samples: int  # the untimed first pass of each path, figure 1
    feed_repeats: int  # figure 3
    feed_batches: int  # per run, figure 3
    profile_samples: int
    worker_samples: int  # per run, figure 5 (33,049: the throughput set's whole epoch)
    cache_repeats: int  # figure 6
    online_documents: int  # figure 7: documents in the text set (real pages, repeated)
    online_repeats: int


FULL = Plan(5, measured_samples=6144, warm_samples=1024, feed_repeats=3, feed_batches=600,
            profile_samples=4096, worker_samples=33_049, cache_repeats=3, online_documents=1600,
            online_repeats=3)  # fmt: skip
QUICK = Plan(3, measured_samples=2048, warm_samples=512, feed_repeats=2, feed_batches=300,
             profile_samples=2048, worker_samples=2048, cache_repeats=2, online_documents=400,
             online_repeats=2)  # fmt: skip
