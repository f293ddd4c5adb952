"""The kinds of set the platform publishes for the loader, described once for every reader.

A shard set (packed tokens, `fm shards build`) and a text set (a version's curated text,
`fm text export`) are both a directory of MDS shards, `index.json` and a manifest written last.
What differs is the manifest's name and contents, the catalog table that registers each
version's sets, and the command that (re)builds one: a `SetFormat` holds exactly that, and the
catalog lookup, the resolution of a source and the node cache take one as an argument instead
of being written once per kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from fm_loader.format.manifest import ShardInfo


class SetManifest(Protocol):
    """What every manifest of a published set says: its key, its version and its shards."""

    @property
    def set_key(self) -> str: ...

    @property
    def source_version(self) -> str: ...

    @property
    def shards(self) -> tuple[ShardInfo, ...]: ...


M = TypeVar("M", bound=SetManifest)


@dataclass(frozen=True)
class SetFormat(Generic[M]):
    """One kind of published set."""

    noun: str  # what messages call it: "shard set", "text set"
    manifest_name: str  # written last: its presence means the set is complete
    catalog_table: str  # the catalog table registering each version's sets
    parse: Callable[[bytes], M]  # the manifest's bytes, validated (ValueError otherwise)
    how_to_build: str  # what to run to (re)build a version's set; `{version}`: its key

    def hint(self, version: str) -> str:
        """What to run to (re)build the set of `version`."""
        return self.how_to_build.format(version=version)
