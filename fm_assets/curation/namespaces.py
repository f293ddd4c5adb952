"""Which data namespaces may be combined in one dataset version, and which batches wait for a
person's approval before curation.

Every landing batch has a namespace (`fm land --namespace`, e.g. `cloud`, `on-device`,
`web-unverified`, `quarantine`). Some must never meet in one version: data collected on devices is
never trained together with unverified web data. The rules live in FM_POLICY_FILE:

    [namespaces]
    never_together = [["on-device", "web-unverified"], ["on-device", "quarantine"]]

Without the file (or the table) the defaults below apply; `fm version create` refuses a version
whose batches break a rule, before anything is committed.

Unverified data waits after validation until someone approves it (`fm approve`, or the
`decide_quarantined_batch` job in the UI). Which batches wait is policy too:

    [approval]
    namespaces = ["quarantine", "web-unverified"]  # batches landed into these wait
    untrusted_sources = ["forum-scrape"]           # batches from these sources wait too

By default only batches landed into `quarantine` wait.
"""

from __future__ import annotations

import itertools
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fm_assets.settings import Settings

DEFAULT_NEVER_TOGETHER: tuple[frozenset[str], ...] = (
    frozenset({"on-device", "web-unverified"}),
    frozenset({"on-device", "quarantine"}),
)


@dataclass(frozen=True)
class NamespacePolicy:
    """Pairs of namespaces no version may hold together."""

    never_together: tuple[frozenset[str], ...] = DEFAULT_NEVER_TOGETHER

    def refuse_mix(self, namespaces: Iterable[str], what: str) -> None:
        """Raise naming the first forbidden pair among `namespaces` (held by `what`)."""
        present = sorted(set(namespaces))
        for a, b in itertools.combinations(present, 2):
            if frozenset({a, b}) in self.never_together:
                raise ValueError(
                    f"{what} would hold namespaces {a!r} and {b!r}, which the namespace policy "
                    f"never combines (held: {', '.join(present)}); choose batches of one side "
                    "with --batches, or change [namespaces] never_together in FM_POLICY_FILE"
                )


DEFAULT_AWAITING_NAMESPACES = frozenset({"quarantine"})


@dataclass(frozen=True)
class ApprovalPolicy:
    """Which landing batches stop after validation until a person decides."""

    namespaces: frozenset[str] = DEFAULT_AWAITING_NAMESPACES
    untrusted_sources: frozenset[str] = frozenset()

    def waits(self, namespace: str, source: str) -> bool:
        """Whether a batch of `source` landed into `namespace` waits for approval."""
        return namespace in self.namespaces or source in self.untrusted_sources

    def why(self, namespace: str, source: str) -> str:
        """Why such a batch waits, for messages."""
        if namespace in self.namespaces:
            return f"was landed into the namespace {namespace!r}"
        return f"comes from the source {source!r}, which the policy marks untrusted"


def _policy_table(settings: Settings, name: str) -> dict[str, Any] | None:
    """The `[name]` table of FM_POLICY_FILE; None without the file or the table."""
    if settings.policy_file is None:
        return None
    try:
        document = tomllib.loads(settings.policy_file.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read FM_POLICY_FILE {settings.policy_file}: {exc}") from exc
    entry = document.get(name)
    if entry is not None and not isinstance(entry, dict):
        raise ValueError(f"{settings.policy_file}: [{name}] must be a table")
    return entry


def _names(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def load_approval_policy(settings: Settings) -> ApprovalPolicy:
    """The `[approval]` table of FM_POLICY_FILE, or the defaults; errors say where."""
    entry = _policy_table(settings, "approval")
    if entry is None:
        return ApprovalPolicy()
    unknown = set(entry) - {"namespaces", "untrusted_sources"}
    lists = {k: entry.get(k, []) for k in ("namespaces", "untrusted_sources")}
    malformed = [
        k
        for k, v in lists.items()
        if not (isinstance(v, list) and all(isinstance(s, str) for s in v))
    ]
    if unknown or malformed:
        raise ValueError(
            f"{settings.policy_file}: [approval] takes namespaces and untrusted_sources, each a "
            f"list of names; unknown keys {sorted(unknown)}, not lists of names {malformed}"
        )
    namespaces = entry.get("namespaces")
    return ApprovalPolicy(
        frozenset(namespaces) if isinstance(namespaces, list) else DEFAULT_AWAITING_NAMESPACES,
        frozenset(lists["untrusted_sources"]),
    )


def load_namespace_policy(settings: Settings) -> NamespacePolicy:
    """The `[namespaces]` table of FM_POLICY_FILE, or the defaults; errors say where."""
    entry = _policy_table(settings, "namespaces")
    if entry is None:
        return NamespacePolicy()
    unknown = set(entry) - {"never_together"}
    pairs = entry.get("never_together", [])
    malformed = [p for p in pairs if not (isinstance(p, list) and len(p) == 2 and len(set(p)) == 2)]
    if unknown or malformed:
        raise ValueError(
            f"{settings.policy_file}: [namespaces] takes only never_together, a list of pairs "
            f'of two different namespaces (e.g. [["on-device", "web-unverified"]]); '
            f"unknown keys {sorted(unknown)}, malformed pairs {malformed}"
        )
    return NamespacePolicy(tuple(frozenset(p) for p in pairs))
