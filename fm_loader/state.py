"""The loader's checkpoint state: a frozen, versioned record that pins what it was taken against."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

STATE_FORMAT_VERSION = 1

# Values a resumed loader must share with the one that took the state. epoch and
# samples_consumed are what the state restores.
PINNED = ("source", "manifest_sha256", "seed", "rank", "world_size")


@dataclass(frozen=True)
class LoaderState:
    """Where one rank stands in the sample stream of one shard set."""

    format_version: int
    source: str
    manifest_sha256: str  # sha256 of fm_manifest.json: the shard set's content, pinned
    seed: int
    epoch: int
    rank: int
    world_size: int
    samples_consumed: int  # of this rank's block of the epoch order

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

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
        for name in expected - {"source", "manifest_sha256"}:
            value = state[name]
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"loader state field {name!r} must be a non-negative int")
        return cls(**state)

    def mismatches(self, other: LoaderState) -> list[str]:
        """Human-readable differences in the pinned values between two states."""
        return [
            f"{name}: checkpoint has {getattr(other, name)!r}, this loader {getattr(self, name)!r}"
            for name in PINNED
            if getattr(self, name) != getattr(other, name)
        ]
