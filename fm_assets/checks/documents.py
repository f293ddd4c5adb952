"""Checks on a stage's documents for one batch: accounting, expectations, token counts.

Each recounts the committed data files on Ray workers (`checks.facts`); the driver merges counts
and fingerprints, so a check costs the driver as little as the stage did.
"""

from __future__ import annotations

from fm_assets.checks.facts import (
    Facts,
    Wanted,
    expected_numbering_sum,
    index_mix,
    table_facts,
)
from fm_assets.checks.outcome import CheckOutcome
from fm_assets.execution import pipelines
from fm_assets.registries.tokenizers import find_tokenizer
from fm_assets.settings import Settings
from fm_assets.storage import catalog, schemas
from fm_assets.storage.bookkeeping import latest_stage_run
from fm_assets.storage.landing import TEXT_MODALITY, read_manifest
from fm_assets.storage.maintenance.history import readable_snapshot
from fm_assets.storage.objectstore import open_object_store
from fm_assets.storage.purge.records import purged_records


def _batch_facts(settings: Settings, table: str, batch_id: str, wanted: Wanted) -> Facts:
    """The facts of a batch's partition of a table of its data namespace."""
    namespace = catalog.batch_namespace(settings, batch_id)
    where = catalog.where_equal("batch_id", batch_id)
    return table_facts(settings, table, where, wanted, namespace=namespace)


def _quarantined(settings: Settings, batch_id: str, stage: str, wanted: Wanted) -> Facts:
    where = catalog.where_all(
        catalog.where_equal("batch_id", batch_id), catalog.where_equal("stage", stage)
    )
    namespace = catalog.batch_namespace(settings, batch_id)
    return table_facts(settings, "quarantine", where, wanted, namespace=namespace)


def records_accounted_for(settings: Settings, stage: str, batch_id: str) -> CheckOutcome:
    """records in = records kept + records quarantined, recounted from the committed tables."""
    upstream = pipelines.upstream_of(stage)
    wanted = Wanted(numbering=upstream is None)
    kept = _batch_facts(settings, stage, batch_id, wanted)
    bad = _quarantined(settings, batch_id, stage, wanted)
    if upstream is None:
        return _raw_accounting(settings, batch_id, kept, bad)
    run = latest_stage_run(settings, batch_id, stage)
    namespace = catalog.batch_namespace(settings, batch_id)
    snapshot = None
    if run and run["input_snapshot_id"]:
        # Catalog maintenance may have expired it: a later snapshot holds the same rows.
        snapshot = readable_snapshot(
            settings, upstream, namespace, batch_id, int(run["input_snapshot_id"])
        )
    records_in = table_facts(
        settings, upstream, catalog.where_equal("batch_id", batch_id), Wanted(), snapshot, namespace
    )
    out = kept.rows + bad.rows
    same = (kept.record_sum + bad.record_sum) & ((1 << 64) - 1) == records_in.record_sum
    passed = out == records_in.rows and same
    if passed:
        description = f"{records_in.rows} in = {kept.rows} kept + {bad.rows} quarantined"
    else:
        lost, extra = max(0, records_in.rows - out), max(0, out - records_in.rows)
        which = "" if lost or extra else " (same count, other records: some lost, some unknown)"
        description = (
            f"{records_in.rows} in, {kept.rows} kept, {bad.rows} quarantined: "
            f"{lost} lost, {extra} unknown or counted twice{which}"
        )
    return CheckOutcome(
        "records_accounted_for",
        passed,
        description,
        {"records_in": records_in.rows, "kept": kept.rows, "quarantined": bad.rows},
    )


def _raw_accounting(settings: Settings, batch_id: str, kept: Facts, bad: Facts) -> CheckOutcome:
    """Every landed file is read, and its records are numbered 0..n-1 with no gap or repeat."""
    manifest = read_manifest(open_object_store(settings), batch_id)
    both = Facts()
    both.merge(kept)
    both.merge(bad)
    numbering = dict(both.numbering)
    # Records a purge removed (`purged_documents`) are accounted for as purged.
    namespace = catalog.batch_namespace(settings, batch_id)
    purged = purged_records(settings, namespace, batch_id)
    for record_id in purged:
        prefix, _, index = record_id.partition(":")
        count, top, total = numbering.get(prefix, (0, -1, 0))
        mixed = (total + index_mix(int(index))) & ((1 << 64) - 1)
        numbering[prefix] = (count + 1, max(top, int(index)), mixed)
    problems = []
    for landed in manifest.files:
        count, top, total = numbering.pop(landed.sha256[:16], (0, -1, 0))
        if not count:
            problems.append(f"{landed.name}: no record and no quarantine row")
        elif top + 1 != count or total != expected_numbering_sum(count):
            problems.append(f"{landed.name}: record numbers have gaps or repeats")
    problems += [f"records of unknown file {prefix}" for prefix in numbering]
    gone = f" + {len(purged)} purged" if purged else ""
    description = (
        f"{len(manifest.files)} files -> {kept.rows} kept + {bad.rows} quarantined{gone}"
        if not problems
        else "; ".join(problems[:5])
    )
    return CheckOutcome(
        "records_accounted_for",
        not problems,
        description,
        {"files": len(manifest.files), "kept": kept.rows, "quarantined": bad.rows},
    )


def expectation_kind(stage: str) -> str:
    """Which expectation suite a stage's table meets (`checks/expectation_specs.py`)."""
    pipeline = pipelines.pipeline_of_stage(stage)
    text = pipeline.modality == TEXT_MODALITY
    if stage == pipeline.names[0]:
        return "raw" if text else "raw_pairs"
    if stage == pipeline.final:
        return "tokenized" if text else "tokenized_pairs"
    return "text" if text else "pairs"


def document_expectations(settings: Settings, stage: str, batch_id: str) -> CheckOutcome:
    """Column-level expectations (great-expectations) over the batch's documents, on Ray workers,
    with `doc_id` unique across the whole batch."""
    kind = expectation_kind(stage)
    # Curation tables add their own columns (scores, language) to the text document's; the text
    # suite checks the document columns, exactly.
    columns = tuple(schemas.TEXT_DOCUMENTS.names) if kind == "text" else None
    wanted = Wanted(expectations=kind, expectation_columns=columns, doc_ids=True)  # type: ignore[arg-type]
    facts = _batch_facts(settings, stage, batch_id, wanted)
    report = facts.expectation_report()
    repeated = facts.duplicate_doc_ids()
    passed = report.success and not repeated
    summary = report.summary() if report.outcomes else f"{facts.rows} documents"
    if repeated:
        summary = f"doc_id repeats {repeated} times across the batch; {summary}"
    return CheckOutcome(
        "document_expectations",
        passed,
        summary,
        {
            "expectations": len(report.outcomes),
            "failed": len(report.failures()) + bool(repeated),
            "documents": facts.rows,
        },
    )


def token_counts_consistent(settings: Settings, stage: str, batch_id: str) -> CheckOutcome:
    """num_tokens equals the stored token list's length, and every id is inside the vocabulary."""
    facts = _batch_facts(settings, stage, batch_id, Wanted(tokens=True))
    problems = (
        [f"{facts.token_mismatches} documents whose num_tokens differs from their tokens"]
        if facts.token_mismatches
        else []
    )
    for digest in sorted(facts.tokenizers):
        info = find_tokenizer(settings, digest)
        if info is None:
            problems.append(f"tokenizer {digest[:12]} is not in the registry")
        elif facts.token_max is not None and (
            facts.token_max >= info.vocab_size or (facts.token_min or 0) < 0
        ):
            problems.append(f"token ids outside the vocabulary of {info.name} ({info.vocab_size})")
    return CheckOutcome(
        "token_counts_consistent",
        not problems,
        "; ".join(problems) or f"{facts.rows} documents, {facts.tokens} tokens",
        {"documents": facts.rows, "tokens": facts.tokens},
    )
