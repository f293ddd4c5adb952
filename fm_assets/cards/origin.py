"""The card's origin section: the share of a version's documents and tokens per natural source
and per generator model (synthetic documents are counted under their generator, not their
source)."""

from __future__ import annotations

from typing import Any

import pyarrow.compute as pc

from fm_assets.settings import Settings
from fm_assets.versions.dataset_version import DatasetVersion
from fm_assets.versions.reader import version_documents

NATURAL, SYNTHETIC = "natural source", "generator"


def origin_rows(settings: Settings, version: DatasetVersion) -> list[dict[str, Any]]:
    """One row per natural source and per generator model of the version: documents, tokens
    and their shares of the version's; synthetic rows also name the sources they landed as."""
    docs = version_documents(
        settings, version, version.pipeline.final, ("source", "generator_model", "num_tokens")
    )
    total_docs, total_tokens = docs.num_rows, int(pc.sum(docs.column("num_tokens")).as_py() or 0)
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for source, model, tokens in zip(
        docs.column("source").to_pylist(),
        docs.column("generator_model").to_pylist(),
        docs.column("num_tokens").to_pylist(),
        strict=True,
    ):
        key = (SYNTHETIC, model) if model is not None else (NATURAL, source)
        group = groups.setdefault(key, {"documents": 0, "tokens": 0, "sources": set()})
        group["documents"] += 1
        group["tokens"] += int(tokens)
        group["sources"].add(source)
    rows = []
    for (kind, name), group in sorted(groups.items()):
        rows.append(
            {
                "kind": kind,
                "name": name,
                "documents": group["documents"],
                "tokens": group["tokens"],
                "document_share": round(group["documents"] / total_docs, 6) if total_docs else 0.0,
                "token_share": round(group["tokens"] / total_tokens, 6) if total_tokens else 0.0,
                "sources": sorted(group["sources"]) if kind == SYNTHETIC else [name],
            }
        )
    return rows


def origin_markdown(rows: list[dict[str, Any]]) -> str:
    """The section's Markdown: one table row per natural source and generator."""
    lines = ["", "## Origin: natural sources and generators", ""]
    lines += ["| Origin | Name | Documents | Share | Tokens | Share | Landed as |"]
    lines += ["|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [
            r["kind"],
            f"`{r['name']}`",
            f"{r['documents']:,}",
            f"{r['document_share']:.1%}",
            f"{r['tokens']:,}",
            f"{r['token_share']:.1%}",
            ", ".join(r["sources"]),
        ]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"
