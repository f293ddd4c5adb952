"""Checks on a stage's documents for one batch: accounting, expectations, token counts."""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
import pyarrow.compute as pc

from fm_assets.checks.expectations import validate_documents
from fm_assets.checks.outcome import CheckOutcome
from fm_assets.execution import pipeline
from fm_assets.registries.tokenizers import find_tokenizer
from fm_assets.settings import Settings
from fm_assets.storage import catalog, schemas
from fm_assets.storage.bookkeeping import latest_stage_run
from fm_assets.storage.landing import read_manifest
from fm_assets.storage.objectstore import open_object_store


def _quarantined(settings: Settings, batch_id: str, stage: str) -> pa.Table:
    return catalog.read_table(
        settings,
        "quarantine",
        row_filter=catalog.where_all(
            catalog.where_equal("batch_id", batch_id), catalog.where_equal("stage", stage)
        ),
        columns=("record_id", "rule"),
    )


def records_accounted_for(settings: Settings, stage: str, batch_id: str) -> CheckOutcome:
    """records in = records kept + records quarantined, recounted from the committed tables."""
    name = "records_accounted_for"
    kept = catalog.read_batch(settings, stage, batch_id, columns=("record_id",))
    bad = _quarantined(settings, batch_id, stage)
    upstream = pipeline.upstream_of(stage)
    if upstream is None:
        return _raw_accounting(settings, batch_id, kept, bad)
    run = latest_stage_run(settings, batch_id, stage)
    snapshot = int(run["input_snapshot_id"]) if run and run["input_snapshot_id"] else None  # type: ignore[arg-type]
    records_in = catalog.read_table(
        settings,
        upstream,
        row_filter=catalog.where_equal("batch_id", batch_id),
        snapshot_id=snapshot,
        columns=("record_id",),
    )
    both = pa.concat_arrays(
        [kept.column("record_id").combine_chunks(), bad.column("record_id").combine_chunks()]
    )
    expected = set(records_in.column("record_id").to_pylist())
    seen = both.to_pylist()
    lost = expected - set(seen)
    extra = set(seen) - expected
    twice = len(seen) - len(set(seen))
    passed = not lost and not extra and not twice and len(seen) == len(expected)
    description = (
        f"{len(expected)} in = {kept.num_rows} kept + {bad.num_rows} quarantined"
        if passed
        else f"{len(expected)} in, {kept.num_rows} kept, {bad.num_rows} quarantined: "
        f"{len(lost)} lost, {len(extra)} unknown, {twice} counted twice"
    )
    return CheckOutcome(
        name,
        passed,
        description,
        {
            "records_in": len(expected),
            "kept": kept.num_rows,
            "quarantined": bad.num_rows,
            "lost_examples": sorted(lost)[:5],
        },
    )


def _raw_accounting(
    settings: Settings, batch_id: str, kept: pa.Table, bad: pa.Table
) -> CheckOutcome:
    """Every landed file is read, and its records are numbered 0..n-1 with no gap or repeat."""
    manifest = read_manifest(open_object_store(settings), batch_id)
    by_file: dict[str, list[int]] = defaultdict(list)
    record_ids = kept.column("record_id").to_pylist() + bad.column("record_id").to_pylist()
    for record_id in record_ids:
        prefix, _, index = record_id.partition(":")
        by_file[prefix].append(int(index))
    problems = []
    for landed in manifest.files:
        indices = sorted(by_file.pop(landed.sha256[:16], []))
        if not indices:
            problems.append(f"{landed.name}: no record and no quarantine row")
        elif indices != list(range(len(indices))):
            problems.append(f"{landed.name}: record numbers have gaps or repeats")
    problems += [f"records of unknown file {prefix}" for prefix in by_file]
    description = (
        f"{len(manifest.files)} files -> {kept.num_rows} kept + {bad.num_rows} quarantined"
        if not problems
        else "; ".join(problems[:5])
    )
    return CheckOutcome(
        "records_accounted_for",
        not problems,
        description,
        {"files": len(manifest.files), "kept": kept.num_rows, "quarantined": bad.num_rows},
    )


def document_expectations(settings: Settings, stage: str, batch_id: str) -> CheckOutcome:
    """Column-level expectations (great-expectations) over the batch's documents."""
    kind = {"raw_documents": "raw", "tokenized_documents": "tokenized"}.get(stage, "text")
    table = catalog.read_batch(settings, stage, batch_id)
    if kind == "text":
        # Curation tables add their own columns (scores, language) to the text document's;
        # the text suite checks the document columns, exactly.
        table = table.select(schemas.TEXT_DOCUMENTS.names)
    report = validate_documents(table, kind)  # type: ignore[arg-type]
    return CheckOutcome(
        "document_expectations",
        report.success,
        report.summary(),
        {"expectations": len(report.outcomes), "failed": len(report.failures())},
    )


def token_counts_consistent(settings: Settings, batch_id: str) -> CheckOutcome:
    """num_tokens equals the stored token list's length, and every id is inside the vocabulary."""
    table = catalog.read_batch(
        settings,
        "tokenized_documents",
        batch_id,
        columns=("num_tokens", "tokens", "tokenizer_hash"),
    )
    lengths = pc.list_value_length(table.column("tokens"))
    mismatched = pc.sum(pc.not_equal(lengths, table.column("num_tokens"))).as_py() or 0
    problems = (
        [f"{mismatched} documents whose num_tokens differs from their tokens"] if mismatched else []
    )
    for digest in pc.unique(table.column("tokenizer_hash")).to_pylist():
        info = find_tokenizer(settings, digest)
        if info is None:
            problems.append(f"tokenizer {digest[:12]} is not in the registry")
            continue
        flat = pc.list_flatten(table.column("tokens"))
        if len(flat) and (pc.max(flat).as_py() >= info.vocab_size or pc.min(flat).as_py() < 0):
            problems.append(f"token ids outside the vocabulary of {info.name} ({info.vocab_size})")
    total = pc.sum(table.column("num_tokens")).as_py() or 0
    return CheckOutcome(
        "token_counts_consistent",
        not problems,
        "; ".join(problems) or f"{table.num_rows} documents, {total} tokens",
        {"documents": table.num_rows, "tokens": total},
    )
