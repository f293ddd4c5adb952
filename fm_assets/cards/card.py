"""Dataset cards: a Markdown page and PNG plots describing one dataset version, from its tables.

Document tables are read at the version's Iceberg tags. `quarantine` and `pii_redactions` are read
at their own tag of the version when they have one, else as they stood at the version's latest
pinned document commit: the runner commits a stage's quarantine and side tables before its
output, so that instant holds the rows behind the version's documents (unless a rerun of one of
its batches was midway then; a waterfall row's `unaccounted` then shows the gap).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from fm_assets.execution import pipeline
from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.objectstore import ObjectStore
from fm_assets.versions.dataset_version import DOCUMENT_TABLES, DatasetVersion

CARD_FILE = "dataset_card.md"
WATERFALL_PLOT = "waterfall.png"
TOKENS_PLOT = "tokens_per_document.png"
CHARACTERS_PLOT = "characters_per_document.png"
EXACT_DEDUP = ("raw_documents", "exact_duplicate")  # (stage, quarantine rule)
NEAR_DEDUP = ("near_deduplicated_documents", "near_duplicate")
PERCENTILES = (50, 90, 99)
UNKNOWN_LANGUAGE = "unknown"  # a final document with no language_tagged_documents row
FINAL_STAGE = pipeline.STAGE_NAMES[-1]


@dataclass(frozen=True)
class DatasetCard:
    version_key: str
    markdown: str
    plots: dict[str, bytes]  # file name -> PNG bytes, referenced by name from the Markdown
    summary: dict[str, object]  # the card's figures, JSON-able, for asset metadata


@dataclass(frozen=True)
class StageFlow:
    """Records of the version's batches entering one stage, quarantined by rule, and kept."""

    stage: str
    records_in: int
    quarantined: dict[str, int]
    kept: int

    @property
    def unaccounted(self) -> int:
        """Records neither kept nor quarantined: 0 unless a table was rewritten mid-cut."""
        return self.records_in - sum(self.quarantined.values()) - self.kept


@dataclass(frozen=True)
class Dedup:
    """Records one dedup rule quarantined, over the records entering its stage."""

    stage: str
    rule: str
    duplicates: int
    records_in: int

    @property
    def ratio(self) -> float:
        return self.duplicates / self.records_in if self.records_in else 0.0


Groups = dict[str, dict[str, int]]  # key -> {"documents": n, "tokens": n}
Stats = dict[str, float | int]  # min, p50, p90, p99, max, mean


@dataclass(frozen=True)
class _Figures:
    documents: int
    tokens: int
    by_source: Groups
    by_language: Groups
    flows: list[StageFlow]
    dedup: dict[str, Dedup]
    pii: dict[str, dict[str, int]]  # kind -> {"redactions": n, "documents": n}
    lengths: dict[str, Stats | None]
    contamination: dict[str, object] | None


def build_card(
    settings: Settings,
    version: DatasetVersion,
    contamination: Mapping[str, object] | None = None,
) -> DatasetCard:
    """Build the card of `version`; `contamination` (flagged benchmarks, items) adds a section."""
    docs = _final_documents(settings, version)
    flows = _stage_flows(settings, version)
    token_lengths = docs.column("num_tokens").to_numpy().astype(np.int64)
    char_lengths = _character_lengths(settings, version)
    figures = _Figures(
        documents=docs.num_rows,
        tokens=int(token_lengths.sum()),
        by_source=_by_key(docs, "source"),
        by_language=_by_key(docs, "language"),
        flows=flows,
        dedup={"exact": _dedup(flows, *EXACT_DEDUP), "near": _dedup(flows, *NEAR_DEDUP)},
        pii=_pii_counts(settings, version, docs.column("doc_id")),
        lengths={"tokens": _stats(token_lengths), "characters": _stats(char_lengths)},
        contamination=(
            None
            if contamination is None
            else json.loads(json.dumps(dict(contamination), sort_keys=True, default=str))
        ),
    )
    plots = {
        WATERFALL_PLOT: _waterfall_plot(flows),
        TOKENS_PLOT: _histogram_plot(token_lengths, "tokens per document"),
        CHARACTERS_PLOT: _histogram_plot(char_lengths, "characters per document"),
    }
    return DatasetCard(
        version_key=version.version_key,
        markdown=_markdown(version, figures),
        plots=plots,
        summary=_summary(version, figures, sorted(plots)),
    )


def _summary(version: DatasetVersion, f: _Figures, plots: list[str]) -> dict[str, object]:
    return {
        "version_key": version.version_key,
        "dataset": version.dataset,
        "version": version.version,
        "batches": list(version.batches),
        "documents": f.documents,
        "tokens": f.tokens,
        "by_source": f.by_source,
        "by_language": f.by_language,
        "waterfall": [
            {
                "stage": flow.stage,
                "records_in": flow.records_in,
                "quarantined": flow.quarantined,
                "kept": flow.kept,
                "unaccounted": flow.unaccounted,
            }
            for flow in f.flows
        ],
        "dedup": {kind: {**dataclasses.asdict(d), "ratio": d.ratio} for kind, d in f.dedup.items()},
        "pii": f.pii,
        "lengths": f.lengths,
        "contamination": f.contamination,
        "plots": plots,
    }


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


def write_card_to_store(card: DatasetCard, store: ObjectStore, prefix: str) -> list[str]:
    """Write the card and its plots under `prefix` in the object store; return their URIs."""
    uris = []
    for name, data in [*sorted(card.plots.items()), (CARD_FILE, card.markdown.encode())]:
        key = f"{prefix.strip('/')}/{name}"
        store.write_bytes_atomic(key, data)
        uris.append(store.uri(key))
    return uris


# --- reading the version's tables ---------------------------------------------------------------


def _snapshot(settings: Settings, version: DatasetVersion, table: str) -> int | None:
    """The snapshot of `table` the version sees; None when the table had no rows then."""
    if table in version.snapshot_ids:
        return version.snapshot_ids[table]
    if table in DOCUMENT_TABLES:
        return None  # create_version pins every document table that had a snapshot
    iceberg = catalog.load_table(settings, table)
    tagged = iceberg.snapshot_by_name(version.version_key)
    if tagged is not None:
        return tagged.snapshot_id
    pinned = [
        catalog.load_table(settings, name).snapshot_by_id(snapshot_id)
        for name, snapshot_id in version.snapshot_ids.items()
    ]
    times = [s.timestamp_ms for s in pinned if s is not None]
    snapshot = iceberg.snapshot_as_of_timestamp(max(times)) if times else None
    return snapshot.snapshot_id if snapshot is not None else None


def _read(
    settings: Settings, version: DatasetVersion, table: str, columns: tuple[str, ...]
) -> pa.Table:
    snapshot_id = _snapshot(settings, version, table)
    if snapshot_id is None:
        schema = catalog.table_schema(table)
        return pa.schema([schema.field(c) for c in columns]).empty_table()
    return catalog.read_table(
        settings, table, catalog.where_in("batch_id", list(version.batches)), snapshot_id, columns
    )


def _final_documents(settings: Settings, version: DatasetVersion) -> pa.Table:
    """doc_id, batch_id, source, num_tokens and language of every document of the version."""
    docs = _read(settings, version, FINAL_STAGE, ("doc_id", "batch_id", "source", "num_tokens"))
    languages = _read(
        settings, version, "language_tagged_documents", ("doc_id", "batch_id", "language")
    )
    joined = docs.join(languages, keys=["doc_id", "batch_id"], join_type="left outer")
    return joined.set_column(
        joined.schema.get_field_index("language"),
        "language",
        pc.fill_null(joined.column("language"), UNKNOWN_LANGUAGE),
    )


def _stage_flows(settings: Settings, version: DatasetVersion) -> list[StageFlow]:
    quarantine = _read(settings, version, "quarantine", ("stage", "rule"))
    counts: dict[str, dict[str, int]] = {}
    for row in quarantine.group_by(["stage", "rule"]).aggregate([("rule", "count")]).to_pylist():
        counts.setdefault(row["stage"], {})[row["rule"]] = int(row["rule_count"])
    flows: list[StageFlow] = []
    for stage in pipeline.STAGE_NAMES:
        quarantined = dict(sorted(counts.get(stage, {}).items()))
        kept = _read(settings, version, stage, ("doc_id",)).num_rows
        # The first stage reads landed files, which no table counts: its input is what it sorted.
        records_in = flows[-1].kept if flows else kept + sum(quarantined.values())
        flows.append(StageFlow(stage, records_in, quarantined, kept))
    return flows


def _pii_counts(
    settings: Settings, version: DatasetVersion, doc_ids: pa.ChunkedArray
) -> dict[str, dict[str, int]]:
    rows = _read(settings, version, "pii_redactions", ("doc_id", "kind"))
    rows = rows.filter(pc.is_in(rows.column("doc_id"), value_set=doc_ids.combine_chunks()))
    grouped = rows.group_by("kind").aggregate([("doc_id", "count"), ("doc_id", "count_distinct")])
    return {
        row["kind"]: {"redactions": row["doc_id_count"], "documents": row["doc_id_count_distinct"]}
        for row in sorted(grouped.to_pylist(), key=lambda r: r["kind"])
    }


def _character_lengths(settings: Settings, version: DatasetVersion) -> np.ndarray:
    """Characters per final document, streamed: the text column never sits in memory whole."""
    snapshot_id = _snapshot(settings, version, FINAL_STAGE)
    if snapshot_id is None:
        return np.zeros(0, dtype=np.int64)
    scan = catalog.load_table(settings, FINAL_STAGE).scan(
        row_filter=catalog.where_in("batch_id", list(version.batches)),
        snapshot_id=snapshot_id,
        selected_fields=("text",),
    )
    parts = [
        pc.utf8_length(batch.column("text")).to_numpy(zero_copy_only=False)
        for batch in scan.to_arrow_batch_reader()
    ]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


# --- figures ------------------------------------------------------------------------------------


def _by_key(docs: pa.Table, key: str) -> dict[str, dict[str, int]]:
    grouped = docs.group_by(key).aggregate([("doc_id", "count"), ("num_tokens", "sum")])
    return {
        row[key]: {"documents": row["doc_id_count"], "tokens": row["num_tokens_sum"]}
        for row in sorted(grouped.to_pylist(), key=lambda r: r[key])
    }


def _dedup(flows: list[StageFlow], stage: str, rule: str) -> Dedup:
    flow = next((f for f in flows if f.stage == stage), None)
    if flow is None:
        return Dedup(stage, rule, 0, 0)
    return Dedup(stage, rule, flow.quarantined.get(rule, 0), flow.records_in)


def _stats(values: np.ndarray) -> Stats | None:
    if values.size == 0:
        return None
    points = np.percentile(values, PERCENTILES)
    return {
        "min": int(values.min()),
        **{f"p{p}": round(float(v), 3) for p, v in zip(PERCENTILES, points, strict=True)},
        "max": int(values.max()),
        "mean": round(float(values.mean()), 3),
    }


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    # No "Software" entry: the bytes then depend on the data and matplotlib's renderer only.
    figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    return buffer.getvalue()


def _waterfall_plot(flows: list[StageFlow]) -> bytes:
    labels, lefts, widths, colors = ["records in"], [0], [flows[0].records_in], ["tab:blue"]
    level = flows[0].records_in
    for flow in flows:
        drops = dict(flow.quarantined)
        if flow.unaccounted:
            drops["(unaccounted)"] = flow.unaccounted
        for rule, count in drops.items():
            level -= count
            labels.append(f"{flow.stage.removesuffix('_documents')}: {rule}")
            lefts.append(level)
            widths.append(count)
            colors.append("tab:red")
    labels.append("documents kept")
    lefts.append(0)
    widths.append(flows[-1].kept)
    colors.append("tab:green")
    figure = Figure(figsize=(8, 1.5 + 0.35 * len(labels)), layout="constrained")
    axes = figure.subplots()
    positions = np.arange(len(labels))
    bars = axes.barh(positions, widths, left=lefts, color=colors)
    texts = [f"{widths[0]:,}", *(f"{-w:+,}" for w in widths[1:-1]), f"{widths[-1]:,}"]
    axes.bar_label(bars, texts, padding=3)
    axes.set_yticks(positions, labels)
    axes.invert_yaxis()
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("records")
    axes.set_title("Where the version's records went")
    return _png(figure)


def _histogram_plot(values: np.ndarray, what: str) -> bytes:
    figure = Figure(figsize=(8, 4), layout="constrained")
    axes = figure.subplots()
    if values.size:
        axes.hist(values, bins=min(50, len(np.unique(values))), color="tab:blue")
        points = np.percentile(values, PERCENTILES)
        for p, v, style in zip(PERCENTILES, points, (":", "--", "-."), strict=True):
            axes.axvline(float(v), color="tab:orange", linestyle=style, label=f"p{p} {v:,.0f}")
        axes.legend(loc="upper right")  # "best" costs a second of layout search per plot
    else:
        axes.text(0.5, 0.5, "no documents", ha="center", va="center", transform=axes.transAxes)
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel(what)
    axes.set_ylabel("documents")
    axes.set_title(f"{what.capitalize()}")
    return _png(figure)


# --- Markdown -----------------------------------------------------------------------------------


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


def _markdown(version: DatasetVersion, f: _Figures) -> str:
    lines = [f"# Dataset card: {version.version_key}", ""]
    lines += _table(
        ["Field", "Value"],
        [
            ["Documents", f"{f.documents:,}"],
            ["Tokens", f"{f.tokens:,}"],
            ["Batches", ", ".join(f"`{b}`" for b in version.batches)],
            ["Tokenizer", f"`{version.tokenizer_hash}`"],
            ["Content hash", f"`{version.content_hash}`"],
        ],
    )
    lines += ["## Stage code versions", ""]
    order = {stage: i for i, stage in enumerate(pipeline.STAGE_NAMES)}
    stages = sorted(version.code_versions, key=lambda s: (order.get(s, len(order)), s))
    lines += _table(["Stage", "Code version"], [[s, version.code_versions[s]] for s in stages])
    lines += ["## Documents by source", ""]
    lines += _share_table("Source", f.by_source, f.tokens or 1)
    lines += ["## Documents by language", ""]
    lines += _share_table("Language", f.by_language, f.tokens or 1)
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
            for flow in f.flows
        ],
    )
    lines += ["## Deduplication", ""]
    lines += _table(
        ["Kind", "Stage", "Duplicates", "Records in", "Ratio"],
        [
            [kind, d.stage, f"{d.duplicates:,}", f"{d.records_in:,}", f"{100 * d.ratio:.2f}%"]
            for kind, d in f.dedup.items()
        ],
    )
    lines += ["## PII redactions", ""]
    if f.pii:
        lines += _table(
            ["Kind", "Redactions", "Documents"],
            [[kind, f"{p['redactions']:,}", f"{p['documents']:,}"] for kind, p in f.pii.items()],
        )
    else:
        lines += ["No PII was redacted in this version's documents.", ""]
    lines += ["## Document lengths", ""]
    lines += [f"![tokens per document]({TOKENS_PLOT})", ""]
    lines += [f"![characters per document]({CHARACTERS_PLOT})", ""]
    columns = ["min", *(f"p{p}" for p in PERCENTILES), "max", "mean"]
    lines += _table(
        ["Per document", *columns],
        [[what, *(f"{s[c]:,}" if s else "n/a" for c in columns)] for what, s in f.lengths.items()],
    )
    lines += ["## Contamination", ""]
    if f.contamination is None:
        lines += ["Not checked for this card.", ""]
    elif not f.contamination:
        lines += ["Nothing flagged.", ""]
    else:
        lines += _table(
            ["Item", "Value"],
            [
                [key, value if isinstance(value, str) else json.dumps(value, sort_keys=True)]
                for key, value in f.contamination.items()
            ],
        )
    return "\n".join(lines).rstrip("\n") + "\n"
