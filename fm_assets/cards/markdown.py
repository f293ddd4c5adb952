"""The Markdown page of a dataset card: tables of the version's counts, and its plots by name."""

from __future__ import annotations

import json
from collections.abc import Mapping

from fm_assets.cards.data import PERCENTILES, CardData, Groups
from fm_assets.cards.plots import CHARACTERS_PLOT, TOKENS_PLOT, WATERFALL_PLOT
from fm_assets.cards.policy import policy_section
from fm_assets.versions.dataset_version import DatasetVersion


def render_markdown(
    version: DatasetVersion, data: CardData, contamination: Mapping[str, object] | None
) -> str:
    """The card of `version`; `contamination` None: not checked, empty: nothing flagged."""
    lines = [f"# Dataset card: {version.version_key}", ""]
    lines += _table(
        ["Field", "Value"],
        [
            ["Documents", f"{data.documents:,}"],
            ["Tokens", f"{data.tokens:,}"],
            ["Batches", ", ".join(f"`{b}`" for b in version.batches)],
            ["Tokenizer", f"`{version.tokenizer_hash}`"],
            ["Content hash", f"`{version.content_hash}`"],
        ],
    )
    lines += ["## Stage code versions", ""]
    order = {stage: i for i, stage in enumerate(version.pipeline.names)}
    stages = sorted(version.code_versions, key=lambda s: (order.get(s, len(order)), s))
    lines += _table(["Stage", "Code version"], [[s, version.code_versions[s]] for s in stages])
    policy_lines, drop_rows = policy_section(data.policies, data.drops_by_batch)
    lines += policy_lines
    lines += ["### What each rule dropped, per batch", ""]
    if drop_rows:
        lines += _table(["Batch", "Stage", "Rule", "Records"], drop_rows)
    else:
        lines += ["Nothing was quarantined.", ""]
    lines += ["## Documents by source", ""]
    lines += _share_table("Source", data.by_source, data.tokens or 1)
    lines += ["## Documents by language", ""]
    lines += _share_table("Language", data.by_language, data.tokens or 1)
    lines += ["## Where records went", "", f"![waterfall]({WATERFALL_PLOT})", ""]
    lines += _table(
        ["Stage", "In", "Quarantined", "Kept", "Quarantine rules"],
        [
            [
                flow.stage,
                f"{flow.records_in:,}",
                f"{sum(flow.quarantined.values()):,}",
                f"{flow.kept:,}",
                ", ".join(f"{rule} {n:,}" for rule, n in flow.quarantined.items())
                + (f" (unaccounted {flow.unaccounted:,})" if flow.unaccounted else ""),
            ]
            for flow in data.flows
        ],
    )
    lines += ["## Deduplication", ""]
    lines += _table(
        ["Kind", "Stage", "Duplicates", "Records in", "Ratio"],
        [
            [kind, d.stage, f"{d.duplicates:,}", f"{d.records_in:,}", f"{100 * d.ratio:.2f}%"]
            for kind, d in data.dedup.items()
        ],
    )
    lines += ["## PII redactions", ""]
    if data.pii:
        lines += _table(
            ["Kind", "Redactions", "Documents"],
            [[kind, f"{p['redactions']:,}", f"{p['documents']:,}"] for kind, p in data.pii.items()],
        )
    else:
        lines += ["No PII was redacted in this version's documents.", ""]
    lines += ["## Document lengths", ""]
    lines += [f"![tokens per document]({TOKENS_PLOT})", ""]
    lines += [f"![characters per document]({CHARACTERS_PLOT})", ""]
    columns = ["min", *(f"p{p}" for p in PERCENTILES), "max", "mean"]
    lines += _table(
        ["Per document", *columns],
        [
            [what, *(f"{s[c]:,}" if s else "n/a" for c in columns)]
            for what, s in data.lengths.items()
        ],
    )
    lines += ["## Contamination", ""]
    if contamination is None:
        lines += ["Not checked for this card.", ""]
    elif not contamination:
        lines += ["Nothing flagged.", ""]
    else:
        lines += _table(
            ["Item", "Value"],
            [
                [key, value if isinstance(value, str) else json.dumps(value, sort_keys=True)]
                for key, value in contamination.items()
            ],
        )
    return "\n".join(lines).rstrip("\n") + "\n"


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return [*lines, ""]


def _share_table(title: str, groups: Groups, total: int) -> list[str]:
    rows: list[list[object]] = [
        [key, f"{g['documents']:,}", f"{g['tokens']:,}", f"{100 * g['tokens'] / total:.2f}%"]
        for key, g in groups.items()
    ]
    return _table([title, "Documents", "Tokens", "Share of tokens"], rows)
