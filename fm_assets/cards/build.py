"""Dataset cards: a Markdown page and SVG plots describing one dataset version, and where they go.

`build_card` reads the version's counts (`data.py`), draws the plots (`plots.py`) and renders the
page (`markdown.py`); `write_card` and `write_card_to_store` write the files, plots first.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fm_assets.cards.data import CardData, read_card_data
from fm_assets.cards.image_text import image_card
from fm_assets.cards.markdown import render_markdown
from fm_assets.cards.origin import origin_markdown, origin_rows
from fm_assets.cards.plots import card_plots
from fm_assets.settings import Settings
from fm_assets.storage.landing import IMAGE_TEXT_MODALITY
from fm_assets.storage.objectstore import ObjectStore
from fm_assets.storage.revocations import require_revocation
from fm_assets.versions.dataset_version import DatasetVersion
from fm_assets.versions.revocation import replaced_base

CARD_FILE = "dataset_card.md"


@dataclass(frozen=True)
class DatasetCard:
    """One version's card: the page, the plots it references, and its figures as metadata."""

    version_key: str
    markdown: str
    plots: dict[str, bytes]  # file name -> SVG (or PNG) bytes, referenced by the Markdown
    summary: dict[str, object]  # the card's figures, JSON-able, for asset metadata


def build_card(
    settings: Settings,
    version: DatasetVersion,
    contamination: Mapping[str, object] | None = None,
    revocations: Sequence[Mapping[str, object]] | None = None,
) -> DatasetCard:
    """Build the card of `version`; `contamination` (flagged benchmarks, items) adds a section,
    and so do `revocations` (what a revocation removed to cut this version; by default, read
    from the revocation that cut it, if one did)."""
    if revocations is None:
        revocations = revocation_sections(settings, version)
    data = read_card_data(settings, version)
    flagged = (
        None
        if contamination is None
        else json.loads(json.dumps(dict(contamination), sort_keys=True, default=str))
    )
    plots = card_plots(data)
    images = image_card(settings, version) if version.modality == IMAGE_TEXT_MODALITY else None
    if images is not None:
        plots.update(images.files)
    summary = _summary(version, data, flagged, sorted(plots))
    markdown = render_markdown(version, data, flagged)
    if images is not None:
        summary["images"] = images.summary
        markdown += "\n" + "\n".join(images.markdown)
    origin = origin_rows(settings, version)
    summary["origin"] = origin
    markdown += origin_markdown(origin)
    if revocations:
        listed = [json.loads(json.dumps(dict(r), default=str)) for r in revocations]
        summary["revocations"] = listed
        markdown += _revocation_section(listed)
    return DatasetCard(version.version_key, markdown, plots, summary)


def revocation_sections(settings: Settings, version: DatasetVersion) -> list[dict[str, object]]:
    """The card's revocation section of a replacement version: the revocation that cut it."""
    base = replaced_base(settings, version.version_key)
    if base is None:
        return []
    r = require_revocation(settings, base.revocation_id)
    return [
        {
            "revocation_id": r.revocation_id,
            "criterion": r.criterion,
            "value": r.value,
            "replaces": base.version_key,
            "documents_removed": base.documents_removed,
            "reason": r.reason,
            "revoked_by": r.revoked_by,
            "revoked_at": r.revoked_at.isoformat(timespec="seconds"),
        }
    ]


def _revocation_section(revocations: list[dict[str, object]]) -> str:
    lines = ["", "## Revocations", ""]
    lines += ["| Revocation | Named | Replaces | Documents removed | Reason | By | At |"]
    lines += ["|---|---|---|---|---|---|---|"]
    for r in revocations:
        cells = [
            r["revocation_id"],
            f"{r['criterion']} `{r['value']}`",
            r["replaces"],
            r["documents_removed"],
            r["reason"],
            r["revoked_by"],
            r["revoked_at"],
        ]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def write_card(card: DatasetCard, directory: Path) -> list[Path]:
    """Write the card and its plots into `directory`, each file atomically; plots first, so a
    reader who sees the card also sees what it references."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in [*sorted(card.plots.items()), (CARD_FILE, card.markdown.encode())]:
        final = directory / name
        tmp = directory / f".{name}.tmp-{uuid.uuid4().hex}"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        written.append(final)
    return written


def version_card_prefix(version_key: str) -> str:
    """Where a version's card lives in the object store (written when the version is cut)."""
    return f"cards/{version_key}"


def copy_version_card(
    settings: Settings, store: ObjectStore, version: DatasetVersion, prefix: str
) -> list[str]:
    """The version's stored card (as last written: at its cut, or by a contamination scan)
    copied under `prefix`; built afresh when the version has none stored. The URIs, the card's
    Markdown last. Copying, not rebuilding: a shard-set build need not draw the plots again."""
    source = version_card_prefix(version.version_key)
    names = store.list_dir(source)
    if CARD_FILE not in names:
        return write_card_to_store(build_card(settings, version), store, prefix)
    uris = []
    for name in [*(n for n in names if n != CARD_FILE), CARD_FILE]:
        key = f"{prefix.strip('/')}/{name}"
        store.write_bytes_atomic(key, store.read_bytes(f"{source}/{name}"))
        uris.append(store.uri(key))
    return uris


def write_card_to_store(card: DatasetCard, store: ObjectStore, prefix: str) -> list[str]:
    """Write the card and its plots under `prefix` in the object store; return their URIs."""
    uris = []
    for name, data in [*sorted(card.plots.items()), (CARD_FILE, card.markdown.encode())]:
        key = f"{prefix.strip('/')}/{name}"
        store.write_bytes_atomic(key, data)
        uris.append(store.uri(key))
    return uris


def _summary(
    version: DatasetVersion,
    data: CardData,
    contamination: dict[str, object] | None,
    plots: list[str],
) -> dict[str, object]:
    return {
        "version_key": version.version_key,
        "dataset": version.dataset,
        "version": version.version,
        "batches": list(version.batches),
        "documents": data.documents,
        "tokens": data.tokens,
        "by_source": data.by_source,
        "by_language": data.by_language,
        "waterfall": [
            {
                "stage": flow.stage,
                "records_in": flow.records_in,
                "quarantined": flow.quarantined,
                "kept": flow.kept,
                "unaccounted": flow.unaccounted,
            }
            for flow in data.flows
        ],
        "dedup": {
            kind: {**dataclasses.asdict(d), "ratio": d.ratio} for kind, d in data.dedup.items()
        },
        "policies": {
            batch: {"source": source, "policy": json.loads(p.to_json()) if p else None}
            for batch, (source, p) in data.policies.items()
        },
        "drops_by_batch": {
            batch: [{"stage": s, "rule": r, "records": n} for s, r, n in drops]
            for batch, drops in data.drops_by_batch.items()
        },
        "pii": data.pii,
        "lengths": data.lengths,
        "contamination": contamination,
        "plots": plots,
    }
