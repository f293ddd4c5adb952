"""Which source each position of the global sample stream comes from: a deterministic schedule.

A mixture names sources with either weights or epoch counts, never both:

    {"web@v3": 0.7, "code@v1": 0.3}          weights: shares of the stream, normalised
    {"web@v3": Epochs(1), "code@v1": Epochs(3)}   epochs: code served 3 times per epoch

The schedule is the Balinski-Young *quota method* run over exact integer weights q_s / D:
position t goes to the source with the largest q_s / (c_s + 1) among those whose count may grow
without exceeding its upper quota ceil(w_s (t + 1)). It is house-monotone and stays within quota,
so for every prefix of length t each source's count c_s(t) satisfies |c_s(t) - w_s t| < 1.
(Megatron's rule, "the source furthest behind its target", overshoots by up to ~1.05 samples
with three or more sources; plain divisor methods by more.) There is no random draw: the stream
depends only on the weights, and a cursor restored from (position, counts) continues it exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class Epochs:
    """Serve a source exactly `count` times per mixture epoch (up-weighting by repetition)."""

    count: int

    def __post_init__(self) -> None:
        if not isinstance(self.count, int) or isinstance(self.count, bool) or self.count < 1:
            raise ValueError(f"Epochs(count) needs a positive int, got {self.count!r}")


MixtureArg = str | Mapping[str, float | int | Epochs]


@dataclass(frozen=True)
class MixtureSpec:
    """A validated mixture: source keys in a fixed order, the mode, and exact weights.

    `weights` are reduced fractions (as strings, e.g. "7/10") in `keys` order for mode "weights",
    and epoch counts for mode "epochs"; a single source is mode "epochs" with count 1.
    """

    keys: tuple[str, ...]
    mode: str  # "weights" | "epochs"
    weights: tuple[str, ...]

    @classmethod
    def parse(cls, source: MixtureArg) -> MixtureSpec:
        """Validate a trainer's `source`; errors say what a valid mixture looks like."""
        if isinstance(source, str):
            return cls((source,), "epochs", ("1",))
        if not isinstance(source, Mapping) or not source:
            raise ValueError(
                f"source must be a version key, a shard-set directory or a non-empty mapping "
                f"of them to weights, got {source!r}"
            )
        keys = tuple(source)
        values = [source[k] for k in keys]
        if all(isinstance(v, Epochs) for v in values):
            return cls(keys, "epochs", tuple(str(v.count) for v in values))  # type: ignore[union-attr]
        if any(isinstance(v, Epochs) for v in values):
            raise ValueError(
                "a mixture uses either weights or Epochs(k) for every source, not both: "
                f"got {dict(source)!r}"
            )
        fractions = []
        for key, value in zip(keys, values, strict=True):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"weight of {key!r} must be a number, got {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"weight of {key!r} must be positive and finite, got {value!r}")
            # repr() is the shortest decimal that round-trips: 0.7 means 7/10, not 0.69999...
            fractions.append(Fraction(repr(value)) if isinstance(value, float) else Fraction(value))
        total = sum(fractions, Fraction(0))
        return cls(keys, "weights", tuple(str(f / total) for f in fractions))

    def integer_weights(self, num_samples: Sequence[int]) -> list[int]:
        """Integer weights q_s (w_s = q_s / sum q): exact, so the schedule is exact everywhere."""
        if self.mode == "epochs":
            return [int(k) * n for k, n in zip(self.weights, num_samples, strict=True)]
        fractions = [Fraction(w) for w in self.weights]
        denominator = math.lcm(*(f.denominator for f in fractions))
        return [int(f * denominator) for f in fractions]

    def epoch_length(self, num_samples: Sequence[int]) -> int:
        """Samples in one mixture epoch.

        Epochs mode: sum of k_s * N_s, so each source is served exactly k_s times.
        Weights mode: the shortest stream in which every source completes a full pass,
        max_s ceil(N_s / w_s); sources with spare share start further passes (see docs).
        """
        if any(n <= 0 for n in num_samples):
            raise ValueError(f"every source needs at least one sample, got sizes {num_samples}")
        if self.mode == "epochs":
            return sum(self.integer_weights(num_samples))
        return max(
            math.ceil(n / Fraction(w)) for n, w in zip(num_samples, self.weights, strict=True)
        )


class ScheduleCursor:
    """Walks the quota schedule forward from any (position, counts) checkpoint.

    `take(n)` returns the source of each of the next n positions and the per-source running
    index of that sample (how many samples of that source came before it in this epoch).
    """

    def __init__(self, weights: Sequence[int], position: int = 0, counts: Sequence[int] = ()):
        if not weights or any(q <= 0 for q in weights):
            raise ValueError(f"schedule weights must be positive, got {list(weights)}")
        self.weights = [int(q) for q in weights]
        self.total = sum(self.weights)
        self.position = position
        self.counts = list(counts) if counts else [0] * len(self.weights)
        if len(self.counts) != len(self.weights) or sum(self.counts) != position:
            raise ValueError(
                f"schedule counts {self.counts} do not add up to position {position} over "
                f"{len(self.weights)} sources"
            )
        if not within_quota(self.weights, position, self.counts):
            raise ValueError(
                f"schedule counts {self.counts} at position {position} are not a position of "
                f"the schedule for weights {self.weights}"
            )

    def take(self, n: int) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
        """(source ids, per-source sample indices) of positions [position, position + n)."""
        sources = np.empty(n, dtype=np.uint8)
        indices = np.empty(n, dtype=np.int64)
        if len(self.weights) == 1:  # one source: the schedule is the identity
            sources[:] = 0
            indices[:] = np.arange(self.counts[0], self.counts[0] + n)
            self.counts[0] += n
            self.position += n
            return sources, indices
        q, c, total, t = self.weights, self.counts, self.total, self.position
        num_sources = range(len(q))
        for i in range(n):
            t += 1
            best = -1
            for s in num_sources:
                # Eligible: c_s + 1 <= ceil(q_s t / total)  <=>  c_s * total < q_s * t.
                if c[s] * total < q[s] * t and (
                    best < 0 or q[s] * (c[best] + 1) > q[best] * (c[s] + 1)
                ):
                    best = s
            sources[i] = best
            indices[i] = c[best]
            c[best] += 1
        self.position = t
        return sources, indices


def within_quota(weights: Sequence[int], position: int, counts: Sequence[int]) -> bool:
    """True when every count lies within one sample of its share of `position` (quota)."""
    total = sum(weights)
    return all(
        (c - 1) * total < q * position < (c + 1) * total
        for q, c in zip(weights, counts, strict=True)
    )
