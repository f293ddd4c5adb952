"""The counts a dataset card shows, read from the tables as one dataset version sees them.

Every table is read through `versions.reader`, as the version sees it (`version_snapshot`), in
each data namespace the version holds, less the documents it leaves out. (A rerun of one of its
batches midway when the version was cut shows as a waterfall row's `unaccounted`.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.landing import IMAGE_TEXT_MODALITY, TEXT_MODALITY
from fm_assets.versions.dataset_version import DatasetVersion
from fm_assets.versions.policies import version_policies
from fm_assets.versions.reader import (
    count_version_rows,
    stream_version_documents,
    version_documents,
    version_rows,
)

# What the card's dedup section counts, per modality: kind -> (stage, quarantine rule).
DEDUP_RULES: dict[str, dict[str, tuple[str, str]]] = {
    TEXT_MODALITY: {
        "exact": ("raw_documents", "exact_duplicate"),
        "near": ("near_deduplicated_documents", "near_duplicate"),
    },
    IMAGE_TEXT_MODALITY: {
        "exact": ("raw_pairs", "exact_duplicate"),
        "exact_pixels": ("deduplicated_pairs", "exact_duplicate_image"),
        "near": ("deduplicated_pairs", "near_duplicate_image"),
    },
}
PERCENTILES = (50, 90, 99)
UNKNOWN_LANGUAGE = "unknown"  # a final document with no language_tagged_documents row

Groups = dict[str, dict[str, int]]  # key -> {"documents": n, "tokens": n}
Stats = dict[str, float | int]  # min, p50, p90, p99, max, mean


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


@dataclass(frozen=True)
class CardData:
    """What a card shows of one version: its totals, breakdowns and per-document lengths."""

    documents: int
    tokens: int
    by_source: Groups
    by_language: Groups
    flows: list[StageFlow]  # one per pipeline stage, in pipeline order
    dedup: dict[str, Dedup]  # "exact", "near"
    pii: dict[str, dict[str, int]]  # kind -> {"redactions": n, "documents": n}
    lengths: dict[str, Stats | None]  # "tokens", "characters"; None: no documents
    token_lengths: npt.NDArray[np.int64]  # per final document, for the histograms
    character_lengths: npt.NDArray[np.int64]
    # batch -> (source, the policy it was curated under; None: not recorded)
    policies: dict[str, tuple[str, Any]]  # DatasetPolicy or ImageTextPolicy
    # batch -> [(stage, rule, records quarantined)], in pipeline order
    drops_by_batch: dict[str, list[tuple[str, str, int]]]


def read_card_data(settings: Settings, version: DatasetVersion) -> CardData:
    """The counts of `version`, read at the snapshots the version sees."""
    docs = _final_documents(settings, version)
    flows = _stage_flows(settings, version)
    token_lengths = docs.column("num_tokens").to_numpy().astype(np.int64)
    character_lengths = _character_lengths(settings, version, docs.column("doc_id"))
    return CardData(
        documents=docs.num_rows,
        tokens=int(token_lengths.sum()),
        by_source=_by_key(docs, "source"),
        by_language=_by_key(docs, "language"),
        flows=flows,
        dedup={kind: _dedup(flows, *rule) for kind, rule in DEDUP_RULES[version.modality].items()},
        pii=_pii_counts(settings, version, docs.column("doc_id")),
        lengths={"tokens": _stats(token_lengths), "characters": _stats(character_lengths)},
        token_lengths=token_lengths,
        character_lengths=character_lengths,
        policies=version_policies(settings, version.version_key),
        drops_by_batch=_drops_by_batch(settings, version),
    )


def _read(
    settings: Settings, version: DatasetVersion, table: str, columns: tuple[str, ...]
) -> pa.Table:
    """The version's rows of `table`, from every data namespace it holds."""
    return version_rows(settings, version, table, columns)


def _final_documents(settings: Settings, version: DatasetVersion) -> pa.Table:
    """doc_id, batch_id, source, num_tokens and language of every document of the version."""
    final = version.pipeline.final
    columns = ("doc_id", "batch_id", "source", "num_tokens")
    if "language" in catalog.table_schema(final).names:  # a pair carries its caption's
        docs = version_documents(settings, version, final, (*columns, "language"))
        return docs.set_column(
            docs.schema.get_field_index("language"),
            "language",
            pc.fill_null(docs.column("language"), UNKNOWN_LANGUAGE),
        )
    docs = version_documents(settings, version, final, columns)
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
    for stage in version.pipeline.names:
        quarantined = dict(sorted(counts.get(stage, {}).items()))
        kept = count_version_rows(settings, version, stage)
        # The first stage reads landed files, which no table counts: its input is what it sorted.
        records_in = flows[-1].kept if flows else kept + sum(quarantined.values())
        flows.append(StageFlow(stage, records_in, quarantined, kept))
    return flows


def _drops_by_batch(
    settings: Settings, version: DatasetVersion
) -> dict[str, list[tuple[str, str, int]]]:
    quarantine = _read(settings, version, "quarantine", ("batch_id", "stage", "rule"))
    grouped = quarantine.group_by(["batch_id", "stage", "rule"]).aggregate([("rule", "count")])
    order = {stage: i for i, stage in enumerate(version.pipeline.names)}
    drops: dict[str, list[tuple[str, str, int]]] = {batch: [] for batch in version.batches}
    for row in grouped.to_pylist():
        drops.setdefault(row["batch_id"], []).append(
            (row["stage"], row["rule"], int(row["rule_count"]))
        )
    for rows in drops.values():
        rows.sort(key=lambda r: (order.get(r[0], len(order)), r[0], -r[2], r[1]))
    return drops


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


def _character_lengths(
    settings: Settings, version: DatasetVersion, doc_ids: pa.ChunkedArray
) -> npt.NDArray[np.int64]:
    """Characters of each of the version's documents (`doc_ids`), from the last table holding
    their text, streamed: the text column never sits in memory whole."""
    parts = [
        pc.utf8_length(batch.column("text")).to_numpy(zero_copy_only=False)
        for batch in stream_version_documents(
            settings, version, version.pipeline.text_table, ("text",), doc_ids.combine_chunks()
        )
    ]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


def _by_key(docs: pa.Table, key: str) -> Groups:
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


def _stats(values: npt.NDArray[np.int64]) -> Stats | None:
    if values.size == 0:
        return None
    points = np.percentile(values, PERCENTILES)
    return {
        "min": int(values.min()),
        **{f"p{p}": round(float(v), 3) for p, v in zip(PERCENTILES, points, strict=True)},
        "max": int(values.max()),
        "mean": round(float(values.mean()), 3),
    }
