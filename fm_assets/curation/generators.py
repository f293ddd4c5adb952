"""Which generator models' output a dataset may hold: the `[generators]` table of FM_POLICY_FILE.

    [generators]
    refused = ["acme/closed-7b"]   # outputs no version may hold (e.g. terms forbid training)

`fm land` refuses a batch claiming a refused model for all of it; documents that name one per
record are refused when a version is cut: `fm version create` names the model and how many
documents, and `fm revoke --generator MODEL` takes them out of every version (current and
future), after which the version can be cut. Without the table no generator is refused.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa

from fm_assets.settings import Settings


@dataclass(frozen=True)
class GeneratorPolicy:
    """Generator models whose output the platform must never train on."""

    refused: frozenset[str] = frozenset()

    def refuse_batch(self, model: str | None, what: str) -> None:
        """Raise when `model` (a batch's generator) is refused."""
        if model is not None and model in self.refused:
            raise ValueError(
                f"{what} claims generator {model!r}, which FM_POLICY_FILE's [generators] refused "
                "lists: its output may not be trained on; land other data, or change the policy"
            )

    def refuse_documents(self, counts: Iterable[tuple[str, int]], what: str) -> None:
        """Raise naming the refused models among (model, documents) pairs of `what`."""
        found = sorted((model, n) for model, n in counts if model in self.refused)
        if found:
            named = ", ".join(f"{n} documents of {model!r}" for model, n in found)
            first = found[0][0]
            raise ValueError(
                f"{what} would hold output of refused generators ({named}; FM_POLICY_FILE "
                f"[generators] refused): take them out of every version with `fm revoke "
                f'--generator {first} --reason "refused generator"`, or choose other batches'
            )


def load_generator_policy(settings: Settings) -> GeneratorPolicy:
    """The `[generators]` table of FM_POLICY_FILE; errors say where and what is wrong."""
    if settings.policy_file is None:
        return GeneratorPolicy()
    try:
        document = tomllib.loads(settings.policy_file.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read FM_POLICY_FILE {settings.policy_file}: {exc}") from exc
    entry = document.get("generators")
    if entry is None:
        return GeneratorPolicy()
    refused = entry.get("refused", []) if isinstance(entry, dict) else None
    unknown = sorted(set(entry) - {"refused"}) if isinstance(entry, dict) else []
    if (
        unknown
        or not isinstance(refused, list)
        or not all(isinstance(m, str) and m for m in refused)
    ):
        raise ValueError(
            f"{settings.policy_file}: [generators] takes refused, a list of model ids; "
            f"unknown keys {unknown}"
        )
    return GeneratorPolicy(frozenset(refused))


def refuse_generators(settings: Settings, what: str, documents: pa.Table) -> None:
    """Raise when `documents` (with a `generator_model` column) hold a refused model's output."""
    policy = load_generator_policy(settings)
    if not policy.refused or documents.num_rows == 0:
        return
    counts = documents.group_by("generator_model").aggregate([("generator_model", "count")])
    policy.refuse_documents(
        (
            (row["generator_model"], int(row["generator_model_count"]))
            for row in counts.to_pylist()
            if row["generator_model"] is not None
        ),
        what,
    )
