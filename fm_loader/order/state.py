"""The loader's checkpoint states: frozen, versioned records of where a job stands in a stream.

Ranks advance in lockstep, so the state of any one rank describes all of them: the global
position (samples consumed by the whole job this epoch) and each source's count at that position.
It holds no rank, world size or worker count: a job of any shape can load it (elastic resume).
Everything that fixes the stream itself is pinned and must match the loader exactly.

`StreamState` is what every state shares (a dataset tokenized in the loader keeps its own,
`fm_loader.order.pack_state`): the plain-dict form a checkpoint holds, the validation of such a
dict (exact fields, each of its type), and the comparison of the pinned values on restore.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, TypeVar

STATE_FORMAT_VERSION = 2
PLAN_VERSION = "quota-window-v1"  # bump when the order or placement algorithm changes

# What fixes a mixture's stream, of shard sets or of text tokenized in the loader: a loader
# restores a state only if all of these are equal.
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

S = TypeVar("S", bound="StreamState")


@dataclass(frozen=True)
class StreamState:
    """The shared behaviour of the frozen state dataclasses."""

    PINNED: ClassVar[tuple[str, ...]]  # the fields a restore must find equal

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (tuples become lists) for torch.save / json checkpoints."""
        return {k: _plain(v) for k, v in asdict(self).items()}

    @classmethod
    def checked(cls: type[S], state: dict[str, Any]) -> S:
        """The state of a dict read from a checkpoint: exactly this format's fields, each of its
        type (non-negative ints, strings, lists of them); raises ValueError naming the field."""
        expected = {f.name for f in fields(cls)}
        if set(state) != expected:
            raise ValueError(
                f"loader state fields {sorted(state)} do not match format {sorted(expected)}"
            )
        values = {f.name: _typed(f.name, str(f.type), state[f.name]) for f in fields(cls)}
        return cls(**values)

    def mismatches(self, other: StreamState) -> list[str]:
        """`name: checkpoint has X, this loader Y` for each pinned value that differs."""
        return [
            f"{name}: checkpoint has {_show(getattr(other, name))}, "
            f"this loader {_show(getattr(self, name))}"
            for name in self.PINNED
            if getattr(self, name) != getattr(other, name)
        ]

    def refuse_unless_same_stream(self, theirs: StreamState) -> None:
        """Raise ValueError naming every pinned value `theirs` (a checkpoint) has otherwise."""
        problems = self.mismatches(theirs)
        if problems:
            raise ValueError(
                "loader state does not match this dataset: "
                + "; ".join(problems)
                + ". Resume with what the checkpoint was taken on (sources and their content, "
                "mixture, tokenizer, seq_len, seed and the other values named), or start a "
                "fresh epoch with set_epoch()"
            )


@dataclass(frozen=True)
class LoaderState(StreamState):
    """Where the job stands in the sample stream of one mixture of shard sets."""

    PINNED: ClassVar[tuple[str, ...]] = (*STREAM_PINNED, "schema_fingerprint")

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

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> LoaderState:
        """Validate a state dict (e.g. from a checkpoint); unknown versions and fields raise."""
        version = state.get("format_version")
        if version != STATE_FORMAT_VERSION:
            raise ValueError(
                f"unsupported loader state format_version {version!r}; this loader reads "
                f"version {STATE_FORMAT_VERSION}"
            )
        return cls.checked(state)


def _typed(name: str, type_name: str, value: Any) -> Any:
    """`value` as field `name` of type `type_name` holds it (lists become tuples)."""
    if type_name == "int":
        if not _count(value):
            raise ValueError(f"loader state field {name!r} must be a non-negative int")
        return value
    if type_name == "str":
        if not isinstance(value, str):
            raise ValueError(f"loader state field {name!r} must be a string")
        return value
    if not isinstance(value, list | tuple):
        raise ValueError(f"loader state field {name!r} must be a list")
    what, item = _ITEMS[type_name]
    if not all(item(v) for v in value):
        raise ValueError(f"loader state field {name!r} must be a list of {what}")
    return tuple(tuple(v) if isinstance(v, list | tuple) else v for v in value)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _pair(value: Any) -> bool:
    return isinstance(value, list | tuple) and len(value) == 2 and all(_count(v) for v in value)


# A list field's annotation -> what its items are, and the test of one.
_ITEMS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "tuple[str, ...]": ("strings", lambda v: isinstance(v, str)),
    "tuple[int, ...]": ("non-negative ints", _count),
    "tuple[tuple[int, int], ...]": ("pairs of non-negative ints", _pair),
}


def _plain(value: Any) -> Any:
    return [_plain(v) for v in value] if isinstance(value, tuple | list) else value


def _show(value: Any) -> str:
    return repr(_plain(value))
