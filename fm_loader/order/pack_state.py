"""The checkpoint state of a dataset tokenized in the loader: which pack groups were consumed.

With a tokenizer given at load time, nobody knows how many samples a group of documents packs
into until it is tokenized, so the state cannot be one global sample position. It is instead
the set of pack groups consumed so far: every group below `frontier`, the groups in `done`, and
for each group in `partial` how many of its samples (a prefix) were consumed. Each rank knows
what it consumed; a job's state is the union of its ranks' (`merge_states`, done for you by
`make_loader(...).state_dict()` when torch.distributed is initialized), and any job shape loads
it: the groups not yet done are dealt out again, each partial one resuming after its consumed
prefix, so every sample is served exactly once.

Pinned like `LoaderState`: sources and their text sets' manifest hashes, mixture, the
tokenizer's hash (its file's sha256), seq_len, seed, shuffle window, documents per group.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from fm_loader.order.state import STREAM_PINNED, StreamState

ONLINE_STATE_KIND = "online-pack"
ONLINE_FORMAT_VERSION = 1
ONLINE_PLAN_VERSION = "quota-window-groups-v1"


class Consumption:
    """Pack groups consumed: all below `frontier`, those in `done`, prefixes of `partial`."""

    def __init__(
        self, frontier: int = 0, done: Iterable[int] = (), partial: Iterable[tuple[int, int]] = ()
    ) -> None:
        self.frontier = frontier
        self.done = {g for g in done if g >= frontier}
        self.partial = {g: n for g, n in partial if g >= frontier and g not in self.done}
        self._advance()

    def copy(self) -> Consumption:
        return Consumption(self.frontier, self.done, self.partial.items())

    def is_done(self, group: int) -> bool:
        return group < self.frontier or group in self.done

    def consumed(self, group: int) -> int:
        """Samples of `group` consumed (0 unless it is partial)."""
        return self.partial.get(group, 0)

    def add(self, group: int, index: int, size: int) -> None:
        """Sample `index` of a group of `size` samples was handed to the trainer."""
        if self.is_done(group):
            raise ValueError(f"pack group {group} was already consumed: a sample came twice")
        if index + 1 >= size:
            self.partial.pop(group, None)
            self.done.add(group)
            self._advance()
        else:
            self.partial[group] = max(self.partial.get(group, 0), index + 1)

    def finish(self, group: int) -> None:
        """A group that packed into no sample (its documents had no tokens) is done."""
        self.partial.pop(group, None)
        self.done.add(group)
        self._advance()

    def merge(self, other: Consumption) -> None:
        frontier = max(self.frontier, other.frontier)
        done = {g for g in self.done | other.done if g >= frontier}
        partial: dict[int, int] = {}
        for source in (self.partial, other.partial):
            for g, n in source.items():
                if g >= frontier and g not in done:
                    partial[g] = max(partial.get(g, 0), n)
        self.frontier, self.done, self.partial = frontier, done, partial
        self._advance()

    def _advance(self) -> None:
        while self.frontier in self.done:
            self.done.discard(self.frontier)
            self.frontier += 1


@dataclass(frozen=True)
class OnlineState(StreamState):
    """Where a job stands in the pack groups of one epoch, and what fixes the stream."""

    PINNED: ClassVar[tuple[str, ...]] = (*STREAM_PINNED, "docs_per_pack")

    kind: str
    format_version: int
    plan_version: str
    sources: tuple[str, ...]
    content_hashes: tuple[str, ...]  # per source: sha256 of its fm_text_manifest.json
    mixture_mode: str
    mixture_weights: tuple[str, ...]
    tokenizer_hash: str  # sha256 of the tokenizer.json given at load time
    seq_len: int
    seed: int
    shuffle_window: int
    docs_per_pack: int
    epoch: int
    frontier: int
    done: tuple[int, ...]
    partial: tuple[tuple[int, int], ...]

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> OnlineState:
        if state.get("kind") != ONLINE_STATE_KIND:
            raise ValueError(
                "this loader state is not one of a dataset tokenized in the loader (it has no "
                f"kind {ONLINE_STATE_KIND!r}): resume it with the shard sets it was taken on"
            )
        if state.get("format_version") != ONLINE_FORMAT_VERSION:
            raise ValueError(
                f"unsupported online loader state format_version {state.get('format_version')!r}"
            )
        return cls.checked(state)

    def consumption(self) -> Consumption:
        return Consumption(self.frontier, self.done, self.partial)


def merge_states(states: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One job state from its ranks' states (taken at the same step): the union of what each
    consumed. Refuses states of different streams or epochs."""
    if not states:
        raise ValueError("merge_states needs at least one state")
    parsed = [OnlineState.from_dict(s) for s in states]
    first = parsed[0]
    for other in parsed[1:]:
        problems = first.mismatches(other)
        if problems or other.epoch != first.epoch:
            raise ValueError(
                "these states come from different streams or epochs: "
                + ("; ".join(problems) or f"epoch {first.epoch} vs {other.epoch}")
            )
    merged = first.consumption()
    for other in parsed[1:]:
        merged.merge(other.consumption())
    return with_consumption(first, merged).to_dict()


def with_consumption(state: OnlineState, consumption: Consumption) -> OnlineState:
    """`state` with its consumed groups replaced."""
    return replace(
        state,
        frontier=consumption.frontier,
        done=tuple(sorted(consumption.done)),
        partial=tuple(sorted(consumption.partial.items())),
    )
