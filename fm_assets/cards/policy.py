"""The card's curation-policy section: the policy each batch was curated under (languages, every
quality threshold per language family, the classifier and its threshold) and what each rule
dropped from each batch."""

from __future__ import annotations

from fm_assets.curation.policy import DatasetPolicy
from fm_assets.curation.quality.families import FAMILIES
from fm_assets.curation.quality.thresholds import QUALITY_RULES, QualityThresholds

Row = list[object]


def policy_section(
    policies: dict[str, tuple[str, DatasetPolicy | None]],
    drops_by_batch: dict[str, list[tuple[str, str, int]]],
) -> tuple[list[str], list[Row]]:
    """Markdown lines of the section: one block per distinct policy (settings and every
    threshold that is on), then the per-batch drops. Returns (lines, drop rows)."""
    lines = ["## Curation policy", ""]
    if not policies:
        lines += ["Not recorded: this version was cut before versions recorded policies.", ""]
    groups: dict[str, tuple[DatasetPolicy | None, list[str]]] = {}
    for batch, (source, policy) in policies.items():
        key = policy.to_json() if policy is not None else f"unrecorded:{source}"
        groups.setdefault(key, (policy, []))[1].append(
            f"`{batch}` ({source or 'source not recorded'})"
        )
    for number, (policy, batches) in enumerate(groups.values(), start=1):
        lines += [f"### Policy {number}: batches {', '.join(batches)}", ""]
        if policy is None:
            lines += ["Not recorded: these batches were curated before runs recorded it.", ""]
            continue
        lines += _settings_table(policy)
        lines += ["Quality thresholds by language family (a document is judged by the rules of"]
        lines += ["the family of its detected language; `off`: the rule is not applied):", ""]
        lines += _thresholds_table(policy.rules())
    rows: list[Row] = [
        [f"`{batch}`", stage, rule, f"{n:,}"]
        for batch, drops in sorted(drops_by_batch.items())
        for stage, rule, n in drops
    ]
    return lines, rows


def _settings_table(policy: DatasetPolicy) -> list[str]:
    languages = ", ".join(policy.allowed_languages) or "every language"
    classifier = (
        f"`{policy.classifier_sha256}`, keeps P(hq) >= {policy.min_classifier_score:g}"
        if policy.classifier_sha256
        else "none"
    )
    rows: list[Row] = [
        ["Source (policy entry)", f"`{policy.name}`, starting from `{policy.base}`"],
        ["Extractor", policy.extractor],
        ["Languages", f"{languages} (lid.176 score >= {policy.min_language_score:g})"],
        ["Quality rule sets", ", ".join(policy.quality_rule_sets) or "none (scores only)"],
        ["Quality classifier", classifier],
        ["PII redaction", "on" if policy.pii_redaction else "off"],
        ["Decontamination", policy.decontamination],
    ]
    return _table(["Setting", "Value"], rows)


def _thresholds_table(rules: dict[str, QualityThresholds]) -> list[str]:
    rows: list[Row] = []
    for rule in QUALITY_RULES:
        cells = []
        for family in FAMILIES:
            thresholds = rules[family]
            value = getattr(thresholds, rule.threshold)
            on = value is not None and rule.rule_set in thresholds.rule_sets
            cells.append(f"{rule.op} {value:g}" if on else "off")
        if any(cell != "off" for cell in cells):
            rows.append([rule.code, f"`{rule.column}`", *cells])
    if not rows:
        return ["No quality threshold is applied: scores are stored, nothing is decided.", ""]
    return _table(["Rule", "Score", *FAMILIES], rows)


def _table(header: list[str], rows: list[Row]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |" for row in rows]
    return [*lines, ""]
