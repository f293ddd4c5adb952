"""The checkpoint state of a stream placed a batch at a time (`fm_loader.order.units`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from fm_loader.order.state import STREAM_PINNED, StreamState

BATCH_STATE_FORMAT_VERSION = 1
BATCH_PLAN_VERSION = "units-quota-window-v1"  # bump when units, order or placement change


@dataclass(frozen=True)
class BatchState(StreamState):
    """Where the job stands in a stream of units: `position` units served by all ranks together
    this epoch, `source_counts` of each source among them. The batch size is pinned: it cuts
    the units, so another one is another stream."""

    PINNED: ClassVar[tuple[str, ...]] = (*STREAM_PINNED, "batch_size", "schema_fingerprints")

    format_version: int
    kind: str  # "batches": what the dict is, beside the other loaders' states
    plan_version: str
    sources: tuple[str, ...]
    content_hashes: tuple[str, ...]
    mixture_mode: str
    mixture_weights: tuple[str, ...]
    tokenizer_hash: str
    schema_fingerprints: tuple[str, ...]  # per source: its set's layout
    seq_len: int  # the largest seq_len of the sources (captions: the most tokens kept)
    seed: int
    shuffle_window: int
    batch_size: int
    epoch: int
    position: int
    source_counts: tuple[int, ...]

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> BatchState:
        if state.get("kind") != "batches" or state.get("format_version") != (
            BATCH_STATE_FORMAT_VERSION
        ):
            raise ValueError(
                f"not a batch-stream loader state (kind 'batches', format "
                f"{BATCH_STATE_FORMAT_VERSION}): got kind {state.get('kind')!r}, format "
                f"{state.get('format_version')!r}; it was taken by a loader over other sets"
            )
        return cls.checked(state)
