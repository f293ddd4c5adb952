"""The card's curation-policy section: the policy each batch was curated under (languages, every
quality threshold per language family, the classifier and its threshold) and what each rule
dropped from each batch."""

from __future__ import annotations

from fm_assets.curation.image_text_policy import ImageTextPolicy
from fm_assets.curation.policy import DatasetPolicy
from fm_assets.curation.quality.families import FAMILIES
from fm_assets.curation.quality.thresholds import QUALITY_RULES, QualityThresholds

Row = list[object]


def policy_section(
    policies: dict[str, tuple[str, DatasetPolicy | ImageTextPolicy | None]],
    drops_by_batch: dict[str, list[tuple[str, str, int]]],
) -> tuple[list[str], list[Row]]:
    """Markdown lines of the section: one block per distinct policy (settings and every
    threshold that is on), then the per-batch drops. Returns (lines, drop rows)."""
    lines = ["## Curation policy", ""]
    if not policies:
        lines += ["Not recorded: this version was cut before versions recorded policies.", ""]
    groups: dict[str, tuple[DatasetPolicy | ImageTextPolicy | None, list[str]]] = {}
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
        if isinstance(policy, ImageTextPolicy):
            lines += image_text_settings_table(policy)
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


def image_text_settings_table(policy: ImageTextPolicy) -> list[str]:
    """An image-text policy's settings: decoding, resize, geometry, caption rules, dedup and
    the model scorers with their thresholds."""
    languages = ", ".join(policy.caption_languages) or "every language"
    resize = policy.resize
    scorers = "; ".join(
        f"`{s.name}` ({s.kind}, `{s.path}`"
        + (f", min {s.min:g}" if s.min is not None else "")
        + (f", max {s.max:g}" if s.max is not None else "")
        + ")"
        for s in policy.scorers
    )
    rows: list[Row] = [
        ["Source (policy entry)", f"`{policy.name}`, starting from `{policy.base}`"],
        ["Decoding", f"at most {policy.max_pixels:,} pixels"],
        [
            "Resize",
            f"longer side <= {resize.max_side or 'any'} px, {resize.format} q{resize.quality}",
        ],
        [
            "Geometry",
            f"smaller side >= {policy.min_side} px, aspect ratio <= {policy.max_aspect_ratio:g}",
        ],
        [
            "Captions",
            f"{policy.min_caption_chars}..{policy.max_caption_chars:,} characters, >= "
            f"{policy.min_caption_words} words, boilerplate "
            f"{'dropped' if policy.drop_boilerplate_captions else 'kept'}",
        ],
        ["Caption languages", f"{languages} (lid.176 >= {policy.min_caption_language_score:g})"],
        ["Near duplicates", f"pHash within {policy.near_dup_max_distance} bits"],
        ["Model scorers", scorers or "none"],
        ["PII redaction", "on" if policy.pii_redaction else "off"],
        ["Decontamination", policy.decontamination],
    ]
    return [
        "| Setting | Value |",
        "|---|---|",
        *(f"| {a} | {b} |" for a, b in rows),
        "",
    ]


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
