"""The loader's checkpoint state: a frozen, versioned record of the global stream position.

Ranks advance in lockstep, so the state of any one rank describes all of them: the global
position (samples consumed by the whole job this epoch) and each source's count at that position.
It holds no rank, world size or worker count: a job of any shape can load it (elastic resume).
Everything that fixes the stream itself is pinned and must match the loader exactly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

STATE_FORMAT_VERSION = 2
PLAN_VERSION = "quota-window-v1"  # bump when the order or placement algorithm changes

# What fixes a mixture's stream, of shard sets or of text tokenized in the loader
# (`fm_loader.order.pack_state`): a loader restores a state only if all of these are equal.
STREAM_PINNED = (
    "plan_version",
    "sources",
    "content_hashes",
    "mixture_mode",
    "mixture_weights",
    "tokenizer_hash",
    "seq_len",
    "seed",
    "shuffle_window",
)
PINNED = (*STREAM_PINNED, "schema_fingerprint")


@dataclass(frozen=True)
class LoaderState:
    """Where the job stands in the sample stream of one mixture of shard sets."""

    format_version: int
    plan_version: str
    sources: tuple[str, ...]  # source keys, in mixture order
    content_hashes: tuple[str, ...]  # per source: sha256 of its fm_manifest.json
    mixture_mode: str  # "weights" | "epochs"
    mixture_weights: tuple[str, ...]  # exact fractions or epoch counts, in `sources` order
    tokenizer_hash: str
    schema_fingerprint: str
    seq_len: int
    seed: int
    shuffle_window: int
    epoch: int
    position: int  # global samples consumed this epoch, by all ranks together
    source_counts: tuple[int, ...]  # samples of each source among those `position`

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (tuples become lists) for torch.save / json checkpoints."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> LoaderState:
        """Validate a state dict (e.g. from a checkpoint); unknown versions and fields raise."""
        version = state.get("format_version")
        if version != STATE_FORMAT_VERSION:
            raise ValueError(
                f"unsupported loader state format_version {version!r}; this loader reads "
                f"version {STATE_FORMAT_VERSION}"
            )
        expected = {f.name for f in fields(cls)}
        if set(state) != expected:
            raise ValueError(
                f"loader state fields {sorted(state)} do not match format {sorted(expected)}"
            )
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = state[f.name]
            if f.type == "int":
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise ValueError(f"loader state field {f.name!r} must be a non-negative int")
            elif f.type == "str":
                if not isinstance(value, str):
                    raise ValueError(f"loader state field {f.name!r} must be a string")
            else:
                if not isinstance(value, list | tuple):
                    raise ValueError(f"loader state field {f.name!r} must be a list")
                value = tuple(value)
            values[f.name] = value
        return cls(**values)

    def mismatches(self, other: LoaderState) -> list[str]:
        """Human-readable differences in the pinned values between two states."""
        return pinned_mismatches(PINNED, self, other)


def pinned_mismatches(names: tuple[str, ...], ours: object, theirs: object) -> list[str]:
    """`name: checkpoint has X, this loader Y` for each of `names` whose values differ."""
    return [
        f"{name}: checkpoint has {_show(getattr(theirs, name))}, "
        f"this loader {_show(getattr(ours, name))}"
        for name in names
        if getattr(ours, name) != getattr(theirs, name)
    ]


def _show(value: Any) -> str:
    return repr(list(value)) if isinstance(value, tuple) else repr(value)
