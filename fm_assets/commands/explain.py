"""`fm explain DOC_ID`: every stage's decision on one document, with the scores and thresholds
that made it.

For each batch that holds the document (a later batch may hold it as an exact duplicate; every
data namespace is searched), the stages in pipeline order: kept (with what the stage measured),
quarantined (rule and reason), or not reached. The thresholds are the ones the stage ran with,
read from its recorded config, so the answer holds for the run that decided, not for the policy
file as it is now.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

from fm_assets.curation.quality.families import language_family
from fm_assets.curation.quality.thresholds import check_rules
from fm_assets.execution.pipelines import pipeline_of_batch
from fm_assets.settings import Settings
from fm_assets.stages.quality import parse_rules_json
from fm_assets.storage import catalog
from fm_assets.storage.bookkeeping import latest_stage_run

Row = dict[str, Any]
_DETAIL_COLUMNS: dict[str, tuple[str, ...]] = {
    "extracted_documents": ("doc_id", "text"),
    "normalized_documents": ("doc_id", "text"),
    "language_tagged_documents": ("language", "language_score"),
    "tokenized_documents": ("tokenizer_hash", "num_tokens"),
}


def explain_document(settings: Settings, doc_id: str) -> list[str]:
    """Lines describing every stage's decision on `doc_id`; ValueError if no table holds it."""
    mine = catalog.where_equal("doc_id", doc_id)
    namespaces = catalog.data_namespaces(settings)
    quarantined = catalog.read_namespaces(
        settings,
        "quarantine",
        namespaces,
        mine,
        ("batch_id", "stage", "rule", "reason", "record_id"),
    ).to_pylist()
    raw = catalog.read_namespaces(
        settings, "raw_documents", namespaces, mine, ("batch_id", "record_id", "source", "url")
    ).to_pylist()
    batches = sorted({r["batch_id"] for r in quarantined + raw})
    if not batches:
        raise ValueError(
            f"no batch holds a document {doc_id}; give the full sha256 (`fm lineage sample` "
            "and `fm export` show doc ids)"
        )
    lines = [f"document {doc_id}"]
    for batch_id in batches:
        lines += ["", *_explain_in_batch(settings, doc_id, batch_id, quarantined, raw)]
    return lines


def _explain_in_batch(
    settings: Settings, doc_id: str, batch_id: str, quarantined: list[Row], raw: list[Row]
) -> list[str]:
    here = catalog.where_all(
        catalog.where_equal("doc_id", doc_id), catalog.where_equal("batch_id", batch_id)
    )
    namespace = catalog.batch_namespace(settings, batch_id)
    record = next((r for r in raw if r["batch_id"] == batch_id), None)
    where = f" record {record['record_id']}, {record['url'] or 'no url'}" if record else ""
    lines = [f"batch {batch_id} (namespace {namespace}){where}"]
    batch_pipeline = pipeline_of_batch(settings, batch_id)
    final_run = latest_stage_run(settings, batch_id, batch_pipeline.final)
    policy = (
        json.loads(final_run["policy_json"]) if final_run and final_run["policy_json"] else None
    )
    if policy is not None and "allowed_languages" in policy:
        lines.append(
            f"  policy: `{policy['name']}` (from {policy['base']}); languages "
            f"{', '.join(policy['allowed_languages']) or 'any'}; classifier "
            f"{(policy['classifier_sha256'] or 'none')[:12]}"
        )
    drops = {r["stage"]: r for r in quarantined if r["batch_id"] == batch_id}
    scores: Row | None = None
    for stage in batch_pipeline.names:
        run = latest_stage_run(settings, batch_id, stage)
        config = json.loads(run["config_json"]) if run and run.get("config_json") else {}
        if stage in drops:
            drop = drops[stage]
            lines.append(f"  {stage:<29} QUARANTINED {drop['rule']}: {drop['reason']}")
            if stage == "quality_filtered_documents" and scores is not None:
                lines += _quality_lines(scores, config)
            lines.append("  (no later stage saw it)")
            return lines
        if run is None:
            lines.append(f"  {stage:<29} not run yet")
            return lines
        columns = _DETAIL_COLUMNS.get(stage, ("doc_id",))
        if stage == "quality_scored_documents":
            columns = tuple(catalog.table_schema(stage).names)
        rows = catalog.read_table(
            settings, stage, here, columns=columns, namespace=namespace
        ).to_pylist()
        if not rows:
            lines.append(f"  {stage:<29} not in its output (a rerun replaced it?)")
            return lines
        if stage == "quality_scored_documents":
            scores = rows[0]
        describe = _DETAILS.get(stage)
        detail = describe(settings, batch_id, rows[0], config) if describe else ""
        lines.append(f"  {stage:<29} kept{'  ' + detail if detail else ''}")
        if stage == "quality_filtered_documents" and scores is not None:
            lines += _quality_lines(scores, config)
    return lines


def _language(settings: Settings, batch_id: str, row: Row, config: dict[str, Any]) -> str:
    allowed = config.get("allowed") or []
    return (
        f"{row['language']} at {row['language_score']:.3f} (kept when >= "
        f"{config.get('min_score', 0.0):g} and among {', '.join(allowed) or 'any language'})"
    )


def _characters(settings: Settings, batch_id: str, row: Row, config: dict[str, Any]) -> str:
    extractor = f" ({config['extractor']})" if "extractor" in config else ""
    return f"{len(row['text']):,} characters{extractor}"


def _tokenized(settings: Settings, batch_id: str, row: Row, config: dict[str, Any]) -> str:
    return f"{row['num_tokens']:,} tokens ({row['tokenizer_hash'][:12]})"


def _pii(settings: Settings, batch_id: str, row: Row, config: dict[str, Any]) -> str:
    here = catalog.where_all(
        catalog.where_equal("doc_id", row["doc_id"]), catalog.where_equal("batch_id", batch_id)
    )
    kinds = catalog.read_table(
        settings,
        "pii_redactions",
        here,
        columns=("kind",),
        namespace=catalog.batch_namespace(settings, batch_id),
    )
    counts = Counter(kinds.column("kind").to_pylist())
    found = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
    return f"redacted: {found}" if found else "nothing redacted"


_DETAILS: dict[str, Callable[[Settings, str, Row, dict[str, Any]], str]] = {
    "extracted_documents": _characters,
    "normalized_documents": _characters,
    "language_tagged_documents": _language,
    "pii_redacted_documents": _pii,
    "tokenized_documents": _tokenized,
}


def _quality_lines(scores: Row, config: dict[str, Any]) -> list[str]:
    """Every active rule of the document's family: score, bound, verdict; then the classifier."""
    if "rules_json" not in config:
        return ["    (this run did not record its thresholds)"]
    family = language_family(str(scores["language"]))
    thresholds = parse_rules_json(config["rules_json"])[family]
    lines = [f"    rules of the {family} family (language {scores['language']}):"]
    for check in check_rules(scores, thresholds):
        value = check.value
        shown = "missing" if value is None else f"{value:.4g}"
        verdict = "pass" if check.passed else "FAIL"
        lines.append(
            f"    {verdict:<4} {check.rule.code:<34} {check.rule.column.split('__', 1)[1]} "
            f"{shown}, kept when {check.rule.op} {check.threshold:g}"
        )
    if not lines[1:]:
        lines.append("    no quality rule is on")
    classifier = scores.get("classifier_score")
    minimum = float(config.get("min_classifier_score", 0.0))
    if classifier is None:
        lines.append("    no quality classifier scored it")
    else:
        verdict = "pass" if classifier >= minimum else "FAIL"
        lines.append(
            f"    {verdict:<4} {'quality_classifier':<34} P(hq) {classifier:.4g} from "
            f"{str(scores['classifier_sha256'])[:12]}, kept when >= {minimum:g}"
        )
    return lines
