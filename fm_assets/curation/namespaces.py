"""Which data namespaces may be combined in one dataset version.

Every landing batch has a namespace (`fm land --namespace`, e.g. `cloud`, `on-device`,
`web-unverified`, `quarantine`). Some must never meet in one version: data collected on devices is
never trained together with unverified web data. The rules live in FM_POLICY_FILE:

    [namespaces]
    never_together = [["on-device", "web-unverified"], ["on-device", "quarantine"]]

Without the file (or the table) the defaults below apply; `fm version create` refuses a version
whose batches break a rule, before anything is committed.
"""

from __future__ import annotations

import itertools
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass

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


def load_namespace_policy(settings: Settings) -> NamespacePolicy:
    """The `[namespaces]` table of FM_POLICY_FILE, or the defaults; errors say where."""
    if settings.policy_file is None:
        return NamespacePolicy()
    try:
        document = tomllib.loads(settings.policy_file.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read FM_POLICY_FILE {settings.policy_file}: {exc}") from exc
    entry = document.get("namespaces")
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
